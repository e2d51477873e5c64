"""The chess catalogue of harness mechanisms: source edits of h0, one lever each.

They follow the authors' proposer rules for chess (their SKILL.md): a mechanism changes
how the visible state is shown, how the reply is read, what the retries say or how much
history is kept; none contains chess knowledge. No engine, no search, no move ordering
or ranking by check, capture or value, no python-chess import (harness code cannot
import it; `whalekit.harness_helpers.chess_display` draws boards from a FEN), and a
legal wrong move is never turned into another move. Each proposal is meant to test one
mechanism; mechanisms on different hooks still compose.

    from whalekit.domains.mechanisms import apply_mechanism
    source = apply_mechanism(domain.initial_harness_source(), BY_NAME["lenient_parser"])
"""

from __future__ import annotations

from whalekit.domains.mechanisms import Composition, Mechanism

# The audit (docs/reproduction-v3.md): the failure modes each hook a mechanism may edit decides
# directly. A mechanism's targets plus its `alters` cover those of its hooks
# (tests/test_mechanism_audit.py); a text hook (prompts, wordings) decides none by itself.
HOOK_FAILURE_MODES: dict[str, tuple[str, ...]] = {
    "board_extras": ("illegal_move",),
    "legal_moves_text": ("illegal_move",),
    "generation_settings": ("format_invalid",),
    "max_new_tokens": ("format_invalid",),
    "manage_context": ("incomplete_line",),
    "format_nudge": ("format_invalid",),
    "format_retries": ("format_invalid",),
    "illegal_nudge": ("illegal_move",),
    "illegal_retries": ("illegal_move",),
    "max_turns": ("incomplete_line",),  # retries spend turns the puzzle's line needs
    "extract_move": ("format_invalid",),
    "few_shot": ("format_invalid",),
    "user_message": (),
    "system_prompt": (),
    "first_user_message": (),
}

piece_lists = Mechanism(
    name="piece_lists",
    hypothesis="Listing each side's pieces by square ('White: Kg1, Qh5') under the diagram spares a small model "
               "decoding the board.",
    targets=("illegal_move", "wrong_move"),
    imports=("from whalekit.harness_helpers.chess_display import piece_lists as draw_piece_lists",),
    methods={"board_extras": '''
def board_extras(self, observation):
    return "Pieces:\\n" + draw_piece_lists(observation["fen"])
'''},
)

legal_moves_by_piece = Mechanism(
    name="legal_moves_by_piece",
    hypothesis="Grouping the legal moves under the piece that makes them (board order, no ranking) shows which "
               "piece can go where at a glance.",
    targets=("illegal_move", "wrong_move"),
    imports=("from whalekit.harness_helpers.chess_display import squares",),
    module_code='''
PIECE_NAMES = {"K": "King", "Q": "Queen", "R": "Rook", "B": "Bishop", "N": "Knight", "P": "Pawn"}
''',
    methods={"legal_moves_text": '''
def legal_moves_text(self, observation):
    board = squares(observation["fen"])
    groups = {}
    for move in observation["legal_moves"]:
        groups.setdefault(move["uci"][:2], []).append(move)
    lines = ["Legal moves, by piece:"]
    for square in sorted(groups):
        name = PIECE_NAMES.get(board.get(square, "?").upper(), "Piece")
        lines.append(f"{name} {square}: " + " ".join(f"[{m['uci']}]" for m in groups[square]))
    return "\\n".join(lines)
'''},
)

compact_legal_moves = Mechanism(
    name="compact_legal_moves",
    hypothesis="One line of bracketed UCI moves instead of one row per move keeps the prompt short enough that the "
               "position and the instruction stay in view.",
    targets=("format_invalid", "illegal_move"),
    methods={"legal_moves_text": '''
def legal_moves_text(self, observation):
    return "Legal moves: " + " ".join(f"[{m['uci']}]" for m in observation["legal_moves"])
'''},
)

move_tag_prefill = Mechanism(
    name="move_tag_prefill",
    hypothesis="Opening the reply with '<move>' and stopping at '</move>' leaves the model only the move to write.",
    targets=("format_invalid",),
    attributes={"max_new_tokens": "8"},
    methods={"generation_settings": '''
def generation_settings(self, state):
    return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=["</move>"], prefill="<move>")
'''},
)

legal_move_choice = Mechanism(
    name="legal_move_choice",
    hypothesis="Constraining the reply to one of the listed legal moves in the answer tag (constrained decoding) "
               "removes format and legality failures and leaves the model only the choice.",
    targets=("format_invalid", "illegal_move"),
    methods={"generation_settings": '''
def generation_settings(self, state):
    moves = [m["uci"] for m in self.current_observation(state)["legal_moves"]]
    return GenerationSettings(max_new_tokens=16, choices=[f"<move>{m}</move>" for m in moves])
'''},
)

compact_history = Mechanism(
    name="compact_history",
    hypothesis="Showing only the current observation (it already lists the accepted moves and the last reply), "
               "without the earlier replies, keeps long lines from drowning the current legal moves.",
    targets=("illegal_move", "incomplete_line"),
    methods={"manage_context": '''
def manage_context(self, messages, state):
    if state.turn == 0:
        return messages
    text = self.observation_text(self.current_observation(state))
    nudge = state.scratch.pop("nudge", None)
    if nudge:
        text = text.rstrip() + "\\n\\nFeedback from the verifier:\\n" + nudge
    kept = [m for m in messages if m.role == "system" or m.kind == "few_shot"]
    return kept + [Message("user", self.user_message(text))]
'''},
)

retry_with_legal_list = Mechanism(
    name="retry_with_legal_list",
    hypothesis="Three retries whose note repeats the legal moves in one line recover replies a single retry "
               "throws away.",
    targets=("format_invalid", "illegal_move"),
    alters=("incomplete_line",),  # its retries spend turns the line needs
    attributes={"format_retries": "3", "illegal_retries": "3", "max_turns": "15"},
    methods={"illegal_nudge": '''
def illegal_nudge(self, move):
    return (f'The move "{move}" is not legal here. Reply only as <move>uci</move> with one of the legal moves '
            "listed above.")
''', "format_nudge": '''
def format_nudge(self, parsed):
    return ("No single move could be read from your reply. Write one legal move from the list in the tag, "
            "for example <move>e2e4</move>, and nothing else.")
'''},
)

lenient_parser = Mechanism(
    name="lenient_parser",
    hypothesis="Reading the last <move> tag, 'e2-e4' spellings and SAN names of the listed moves turns replies the "
               "strict parser rejects into moves.",
    targets=("format_invalid",),
    methods={"extract_move": '''
def extract_move(self, reply, state):
    tags = re.findall(r"<move>\\s*([^<]*?)\\s*</move>", reply, re.I)
    text = tags[-1] if tags else reply
    text = re.sub(r"\\b([a-h][1-8])\\s*[-x]\\s*([a-h][1-8])", r"\\1\\2", text, flags=re.I)
    uci = list(dict.fromkeys(m.lower() for m in re.findall(r"\\b([a-h][1-8][a-h][1-8][qrbnQRBN]?)\\b", text)))
    if len(uci) == 1:
        return uci[0]
    if len(uci) > 1:
        return uci[-1] if tags else "__ambiguous_multiple_moves__"
    exact, lower = {}, {}
    for move in self.current_observation(state)["legal_moves"]:
        exact[move["san"].rstrip("+#")] = move["uci"]
        lower.setdefault(move["san"].rstrip("+#").lower(), move["uci"])
    tokens = re.findall(r"O-O-O|O-O|[A-Za-z][A-Za-z0-9=]*[1-8](?:=[QRBN])?", text)
    named = list(dict.fromkeys(exact.get(t) or lower[t.lower()] for t in tokens if t in exact or t.lower() in lower))
    if len(named) == 1:
        return named[0]
    return "__ambiguous_multiple_moves__" if named else "__no_move__"
'''},
)

few_shot_format = Mechanism(
    name="few_shot_format",
    hypothesis="One worked exchange on the opening position (not a puzzle) shows the exact reply shape.",
    targets=("format_invalid",),
    module_code='''
EXAMPLE_OBSERVATION = {
    "side_to_move": "white", "fen": "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "board": "8 r n b q k b n r\\n7 p p p p p p p p\\n6 . . . . . . . .\\n5 . . . . . . . .\\n4 . . . . . . . .\\n"
             "3 . . . . . . . .\\n2 P P P P P P P P\\n1 R N B Q K B N R\\n  a b c d e f g h",
    "last_opponent_move": None, "accepted_moves": [], "move_number": 1,
    "legal_moves": [{"uci": u, "san": s} for u, s in (
        ("a2a3", "a3"), ("a2a4", "a4"), ("b1a3", "Na3"), ("b1c3", "Nc3"), ("b2b3", "b3"), ("b2b4", "b4"),
        ("c2c3", "c3"), ("c2c4", "c4"), ("d2d3", "d3"), ("d2d4", "d4"), ("e2e3", "e3"), ("e2e4", "e4"),
        ("f2f3", "f3"), ("f2f4", "f4"), ("g1f3", "Nf3"), ("g1h3", "Nh3"), ("g2g3", "g3"), ("g2g4", "g4"),
        ("h2h3", "h3"), ("h2h4", "h4"))],
}
''',
    methods={"few_shot": '''
def few_shot(self, task):
    example = self.user_message(self.observation_text(EXAMPLE_OBSERVATION))
    return [Message("user", example, kind="few_shot"), Message("assistant", "<move>e2e4</move>", kind="few_shot")]
'''},
)

goal_instruction = Mechanism(
    name="goal_instruction",
    hypothesis="Saying how many of its own moves the solver must find, and that one reply is one move, frames "
               "the move-by-move protocol.",
    targets=("format_invalid", "incomplete_line"),
    methods={"user_message": '''
def user_message(self, observation_text):
    return ("Solve the current chess puzzle position. You play one move per reply; the opponent answers after "
            "each correct move.\\n\\n" + observation_text + "\\n\\nGive exactly one move as <move>uci</move>, "
            "for example <move>e2e4</move>.\\nNo explanation.")
'''},
)

CATALOGUE: list[Mechanism] = [piece_lists, legal_moves_by_piece, compact_legal_moves, move_tag_prefill,
                              legal_move_choice, compact_history, retry_with_legal_list, lenient_parser,
                              few_shot_format, goal_instruction]
BY_NAME: dict[str, Mechanism] = {m.name: m for m in CATALOGUE}


# Prompt wordings: text-only edits of system_prompt and first_user_message, the search
# space of the prompt-only (FST) baseline. Every other mechanism above changes code.
player_persona = Mechanism(
    name="player_persona",
    hypothesis="Casting the model as a player who answers with one move in the tag makes a bare tagged move the "
               "expected reply.",
    targets=("format_invalid",),
    methods={"system_prompt": '''
def system_prompt(self, task):
    return ("You are a chess player solving a puzzle. You answer with exactly one move in UCI notation inside "
            "<move></move> tags, for example <move>g1f3</move>, and nothing else.")
'''},
)

instruction_first = Mechanism(
    name="instruction_first",
    hypothesis="Stating the answer shape before the position keeps the model from describing the board.",
    targets=("format_invalid",),
    methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return ("Reply with one move as <move>uci</move> and nothing else.\\n\\n"
            + self.observation_text(task.inputs["observation"]))
'''},
)

uci_wording = Mechanism(
    name="uci_wording",
    hypothesis="Explaining UCI (from-square then to-square, copied from the list) is easier to follow than "
               "'uci'.",
    targets=("format_invalid", "illegal_move"),
    methods={"first_user_message": '''
def first_user_message(self, task, initial_results):
    return (self.observation_text(task.inputs["observation"]) + "\\n\\nAnswer with one of the legal moves above, "
            "written as its from-square and to-square inside the tag, for example <move>e2e4</move>. "
            "Write nothing else.")
'''},
)

PROMPT_WORDINGS: list[Mechanism] = [player_persona, instruction_first, uci_wording]


# The cpu preset's starting harness: the authors' h0 plus the least protocol scaffolding
# SmolLM2-135M needs (under the faithful h0 it never replies with a move in the asked form).
# One mechanism: the reply is constrained to `<move>uci</move>` for one of the listed legal
# moves. Every legal move stays allowed, unranked and unmarked (no check, capture or mate
# filter), so the choice is the model's; the floor it must beat is the random legal move.
COMPOSITIONS: list[Composition] = [
    Composition(name="h0_cpu", base="h0", mechanisms=("legal_move_choice",),
                purpose="Chess h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol "
                        "scaffolding\nfor a 135M model (the reply constrained to one listed legal move in the "
                        "answer tag)."),
    # h1: three mechanisms that matter for a small model (the calibration's better harness).
    Composition(name="h1", base="h0", mechanisms=("compact_legal_moves", "legal_move_choice", "compact_history"),
                harness_name="chess-h1",
                purpose="Chess h1: h0 with three catalogue mechanisms that matter for a small model:\n"
                        "compact_legal_moves (one line of bracketed UCI moves), legal_move_choice (the reply is\n"
                        "constrained to one listed legal move in the answer tag, so format and legality are\n"
                        "certain and only the choice is the model's) and compact_history (only the current\n"
                        "observation is shown, without earlier replies). No chess knowledge, no move ranking."),
]
