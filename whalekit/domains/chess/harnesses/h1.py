"""Chess h1: h0 plus five catalogue mechanisms that matter for a small model.

legal_moves_san (the sorted legal SAN moves, mates marked '#'), mate_instruction (say it
is a mate and show the answer shape), answer_prefill ("Move:" and an 8-token budget),
lenient_parser (the first legal move anywhere in the reply, any case or notation) and
few_shot_examples (three solved mate-in-1 exchanges in the same format). Equivalent to
applying those mechanisms to h0 with whalekit.mechanisms.apply_mechanism."""

import re

import chess

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness
from whalekit.types import Message, TaskView

MOVE = re.compile(r"(?:O-O(?:-O)?|[KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](?:=[QRBN])?|[a-h][1-8][a-h][1-8][qrbn]?)[+#]?")
FEW_SHOT_POSITIONS = [
    ("6k1/5ppp/8/8/8/8/5PPP/3R2K1 w - - 0 1", "Rd8#"),
    ("r1bqkbnr/ppp2ppp/2np4/4p3/2B1P3/5Q2/PPPP1PPP/RNB1K1NR w KQkq - 0 4", "Qxf7#"),
    ("rnbqkbnr/pppp1ppp/8/4p3/6P1/5P2/PPPPP2P/RNBQKBNR b KQkq - 0 2", "Qh4#"),
]


class ChessH1(Harness):
    name = "chess-h1"
    max_turns = 1
    max_new_tokens = 8
    stop = ["\n", ",", " ("]
    prefill = "Move:"

    def system_prompt(self, task):
        return "You are a chess player."

    def position_text(self, task):
        return f"Position (FEN): {task.inputs['fen']}\n{task.inputs['side_to_move'].capitalize()} to move."

    def board_text(self, task):
        return ""

    def moves_text(self, task, initial_results):
        board = chess.Board(task.inputs["fen"])
        moves = sorted(board.san(m) for m in board.legal_moves)
        return "Legal moves: " + " ".join(moves)

    def instruction(self, task):
        side = task.inputs["side_to_move"].capitalize()
        n = task.inputs.get("moves_to_find") or 1
        if n == 1:
            return (f"{side} can give checkmate in one move. Reply with that one move in SAN (for example Qh7#) "
                    "and nothing else.")
        return (f"{side} can force checkmate in {n} moves. Reply with {side}'s {n} moves in order, in SAN, "
                "separated by spaces, and nothing else.")

    def first_user_message(self, task, initial_results):
        parts = [self.position_text(task), self.board_text(task), self.moves_text(task, initial_results),
                 self.instruction(task)]
        return "\n\n".join(part for part in parts if part)

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

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=list(self.stop), prefill=self.prefill)

    def extract_move(self, reply, state):
        board = chess.Board(state.task.inputs["fen"])
        first_move_like = None
        for token in re.findall(r"[A-Za-z0-9][A-Za-z0-9=+#-]*", reply):
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

    def parse(self, reply, state):
        if self.prefill and reply.startswith(self.prefill):
            reply = reply[len(self.prefill):]
        move = self.extract_move(reply, state)
        if move is None:
            return FormatError("the reply is not exactly one move in SAN or UCI")
        return FinalAnswer(move)
