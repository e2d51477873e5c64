"""The chess catalogue of harness mechanisms: source edits of h0 that a proposer combines.

Each targets one of the domain's failure modes: what the model is shown (diagram, piece
lists, legal moves flat or grouped), how it must answer (instruction, prefill, token
budget, few-shot examples) and how its reply is read (lenient parsing, a retry with
feedback on an illegal move). Mechanisms that touch different hooks compose; the two
board views and the two legal-move views are alternatives (same hooks, last one wins).

    from whalekit.mechanisms import apply_mechanism
    source = apply_mechanism(domain.initial_harness_source(), BY_NAME["legal_moves_san"])
"""

from __future__ import annotations

from whalekit.mechanisms import Mechanism

ascii_board = Mechanism(
    name="ascii_board",
    hypothesis="A diagram with rank and file labels is easier for a small model to read than a FEN string.",
    targets=("illegal_move", "wrong_move"),
    imports=("import chess",),
    methods={"board_text": '''
def board_text(self, task):
    rows = str(chess.Board(task.inputs["fen"])).splitlines()
    diagram = "\\n".join(f"{8 - i} {row}" for i, row in enumerate(rows))
    return "Board (uppercase = White, lowercase = Black):\\n" + diagram + "\\n  a b c d e f g h"
'''},
)

piece_lists = Mechanism(
    name="piece_lists",
    hypothesis="Listing each side's pieces by square ('White: Kg1, Qh5') spares the model decoding the FEN.",
    targets=("illegal_move", "wrong_move"),
    imports=("import chess",),
    methods={"board_text": '''
def board_text(self, task):
    board = chess.Board(task.inputs["fen"])
    lines = []
    for color, label in ((chess.WHITE, "White"), (chess.BLACK, "Black")):
        names = []
        for piece_type in (chess.KING, chess.QUEEN, chess.ROOK, chess.BISHOP, chess.KNIGHT, chess.PAWN):
            letter = "" if piece_type == chess.PAWN else chess.piece_symbol(piece_type).upper()
            names += [letter + chess.square_name(s) for s in board.pieces(piece_type, color)]
        lines.append(f"{label}: {', '.join(names)}")
    return "\\n".join(lines)
'''},
)

legal_moves_san = Mechanism(
    name="legal_moves_san",
    hypothesis="Choosing from the list of legal SAN moves (mates marked '#') removes illegal answers.",
    targets=("illegal_move", "format_invalid", "wrong_move"),
    imports=("import chess",),
    methods={"moves_text": '''
def moves_text(self, task, initial_results):
    board = chess.Board(task.inputs["fen"])
    moves = sorted(board.san(m) for m in board.legal_moves)
    return "Legal moves: " + " ".join(moves)
'''},
)

legal_moves_by_kind = Mechanism(
    name="legal_moves_by_kind",
    hypothesis="Legal moves grouped as checkmates, checks, captures, others (via the legal_moves tool) put "
               "the forcing moves first, where a mate puzzle's answer is.",
    targets=("illegal_move", "wrong_move"),
    methods={
        "initial_tool_calls": '''
def initial_tool_calls(self, task):
    return [ToolCall("legal_moves", {"notation": "san", "group": "kind"})]
''',
        "moves_text": '''
def moves_text(self, task, initial_results):
    lists = [r.output for r in initial_results if r.name == "legal_moves" and r.ok]
    return "Legal moves:\\n" + lists[0] if lists else ""
'''},
    imports=("from whalekit.types import ToolCall",),
)

mate_instruction = Mechanism(
    name="mate_instruction",
    hypothesis="Saying the goal is checkmate, and the exact answer shape, narrows what the model writes.",
    targets=("format_invalid", "wrong_move"),
    methods={"instruction": '''
def instruction(self, task):
    side = task.inputs["side_to_move"].capitalize()
    n = task.inputs.get("moves_to_find") or 1
    if n == 1:
        return (f"{side} can give checkmate in one move. Reply with that one move in SAN (for example Qh7#) "
                "and nothing else.")
    return (f"{side} can force checkmate in {n} moves. Reply with {side}'s {n} moves in order, in SAN, "
            "separated by spaces, and nothing else.")
'''},
)

answer_prefill = Mechanism(
    name="answer_prefill",
    hypothesis="Starting the reply with 'Move:' and a small token budget stops the model rambling.",
    targets=("format_invalid",),
    attributes={"prefill": "'Move:'", "max_new_tokens": "8", "stop": "['\\n', ',', ' (']"},
)

lenient_parser = Mechanism(
    name="lenient_parser",
    hypothesis="Taking the first legal move anywhere in the reply, in any case and notation, turns format "
               "failures into moves.",
    targets=("format_invalid", "illegal_move"),
    imports=("import chess",),
    methods={"extract_move": '''
def extract_move(self, reply, state):
    board = chess.Board(state.task.inputs["fen"])
    tokens = re.findall(r"[A-Za-z0-9][A-Za-z0-9=+#-]*", reply)
    first_move_like = None
    for token in tokens:
        clean = token.rstrip("+#")
        for candidate in (clean, clean[:1].upper() + clean[1:], clean.lower()):
            try:
                return board.san(board.parse_san(candidate))
            except ValueError:
                pass
            try:
                return board.san(board.parse_uci(candidate.lower()))
            except ValueError:
                pass
        if first_move_like is None and MOVE.fullmatch(token):
            first_move_like = token
    return first_move_like
'''},
)

legal_move_choice = Mechanism(
    name="legal_move_choice",
    hypothesis="Constraining the reply to exactly one legal SAN move (constrained decoding) leaves the model only "
               "the choice: no format failures, no illegal moves.",
    targets=("format_invalid", "illegal_move"),
    imports=("import chess",),
    methods={"generation_settings": '''
def generation_settings(self, state):
    board = chess.Board(state.task.inputs["fen"])
    moves = sorted(board.san(m) for m in board.legal_moves)
    return GenerationSettings(max_new_tokens=max(self.max_new_tokens, 16), stop=list(self.stop),
                              prefill=self.prefill, choices=moves)
'''},
)

retry_illegal = Mechanism(
    name="retry_illegal",
    hypothesis="Telling the model its move was illegal or unreadable, and letting it try twice more, "
               "recovers answers a one-shot harness throws away.",
    targets=("illegal_move", "format_invalid"),
    imports=("import chess",),
    attributes={"max_turns": "3"},
    methods={
        "parse": '''
def parse(self, reply, state):
    if self.prefill and reply.startswith(self.prefill):
        reply = reply[len(self.prefill):]
    move = self.extract_move(reply, state)
    if move is None:
        return FormatError("the reply is not a move")
    board = chess.Board(state.task.inputs["fen"])
    try:
        board.parse_san(move.rstrip("+#"))
    except ValueError:
        try:
            board.parse_uci(move.lower())
        except ValueError:
            return FormatError(f"{move} is not a legal move here")
    return FinalAnswer(move)
''',
        "error_feedback": '''
def error_feedback(self, error, state):
    board = chess.Board(state.task.inputs["fen"])
    moves = " ".join(sorted(board.san(m) for m in board.legal_moves))
    return f"{error.message}. Choose one of these legal moves: {moves}. Reply with the move only."
'''},
)

few_shot_examples = Mechanism(
    name="few_shot_examples",
    hypothesis="Two worked exchanges in the harness's own format show the model what a good answer looks like.",
    targets=("format_invalid", "wrong_move"),
    imports=("from whalekit.types import Message, TaskView",),
    module_code='''
FEW_SHOT_POSITIONS = [
    ("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "Rd8#"),
    ("r1bqkbnr/ppp2ppp/2np4/4p3/2B1P3/5Q2/PPPP1PPP/RNB1K1NR w KQkq - 0 4", "Qxf7#"),
    ("rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq - 0 2", "Qh4#"),
]
''',
    methods={"few_shot": '''
def few_shot(self, task):
    messages = []
    for fen, move in FEW_SHOT_POSITIONS:
        side = "white" if fen.split()[1] == "w" else "black"
        example = TaskView(id="example", domain="chess", inputs={**task.inputs, "fen": fen, "side_to_move": side,
                                                                 "last_move": None, "mate_in": 1,
                                                                 "moves_to_find": 1})
        messages.append(Message("user", self.first_user_message(example, []), kind="few_shot"))
        messages.append(Message("assistant", (self.prefill + " " + move).strip(), kind="few_shot"))
    return messages
'''},
)

CATALOGUE: list[Mechanism] = [ascii_board, piece_lists, legal_moves_san, legal_moves_by_kind, mate_instruction,
                              answer_prefill, lenient_parser, legal_move_choice, retry_illegal, few_shot_examples]
BY_NAME: dict[str, Mechanism] = {m.name: m for m in CATALOGUE}


# Prompt wordings: text-only edits of system_prompt and first_user_message, the search
# space of the prompt-only (FST) baseline. Every other mechanism above changes code.
engine_persona = Mechanism(
    name="engine_persona",
    hypothesis="Casting the model as an engine that answers with one SAN move, with examples of the notation, "
               "makes a bare move the expected reply.",
    targets=("format_invalid",),
    methods={"system_prompt": '''
def system_prompt(self, task):
    return ("You are a chess engine. You reply with exactly one chess move in standard algebraic notation "
            "(for example Nf3, exd5, O-O or Qh7#) and nothing else.")
'''},
)

instruction_first = Mechanism(
    name="instruction_first",
    hypothesis="Stating the task and the answer shape before the position keeps the model from describing the FEN.",
    targets=("format_invalid", "wrong_move"),
    methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return ("Find the checkmate. Reply with the move only, in SAN.\\n\\n" + self.position_text(task)
            + "\\n\\nMove:")
'''},
)

uci_wording = Mechanism(
    name="uci_wording",
    hypothesis="Asking for the move as from-square and to-square (e2e4) is easier to produce than SAN.",
    targets=("format_invalid", "illegal_move"),
    methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return (self.position_text(task) + "\\n\\nAnswer with one move in UCI notation: the from-square and the "
            "to-square, for example e2e4 or g1f3. Write nothing else.")
'''},
)

PROMPT_WORDINGS: list[Mechanism] = [engine_persona, instruction_first, uci_wording]
