"""Chess h0: the deliberately plain starting point. The model sees the FEN and the side
to move and must answer with one move; the parser accepts the reply only when it is
exactly one move in SAN or UCI. The message is assembled from small methods
(position_text, board_text, moves_text, instruction) so mechanisms can change one part."""

import re

from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness

MOVE = re.compile(r"(?:O-O(?:-O)?|[KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](?:=[QRBN])?|[a-h][1-8][a-h][1-8][qrbn]?)[+#]?")


class ChessH0(Harness):
    name = "chess-h0"
    max_turns = 1
    max_new_tokens = 32
    stop = ["\n"]
    prefill = ""

    def system_prompt(self, task):
        return "You are a chess player."

    def position_text(self, task):
        return f"Position (FEN): {task.inputs['fen']}\n{task.inputs['side_to_move'].capitalize()} to move."

    def board_text(self, task):
        return ""

    def moves_text(self, task, initial_results):
        return ""

    def instruction(self, task):
        return "Answer with one move."

    def first_user_message(self, task, initial_results):
        parts = [self.position_text(task), self.board_text(task), self.moves_text(task, initial_results),
                 self.instruction(task)]
        return "\n\n".join(part for part in parts if part)

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=list(self.stop), prefill=self.prefill)

    def extract_move(self, reply, state):
        text = reply.strip()
        return text if MOVE.fullmatch(text) else None

    def parse(self, reply, state):
        if self.prefill and reply.startswith(self.prefill):
            reply = reply[len(self.prefill):]
        move = self.extract_move(reply, state)
        if move is None:
            return FormatError("the reply is not exactly one move in SAN or UCI")
        return FinalAnswer(move)
