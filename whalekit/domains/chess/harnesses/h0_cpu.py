"""Chess h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol scaffolding
for a 135M model (the reply constrained to one listed legal move in the answer tag).

Generated: h0.py plus the catalogue mechanisms legal_move_choice
(whalekit/domains/chess/mechanisms.py), applied in that order by `python -m whalekit.search.compositions`.
Do not edit: change the composition or the mechanisms and regenerate; tests/test_cpu_start.py checks it."""
import re
from whalekit.harness import FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import Message, ToolCall
UCI = '([a-h][1-8][a-h][1-8][qrbn]?)'
PATTERNS = [re.compile('<move>\\s*' + UCI + '\\s*</move>', re.I), re.compile('\\[\\s*' + UCI + '\\s*\\]', re.I), re.compile('\\b' + UCI + '\\b', re.I)]

class ChessH0(Harness):
    name = 'chess-h0'
    max_turns = 9
    format_retries = 1
    illegal_retries = 1
    max_new_tokens = 256

    def system_prompt(self, task):
        return 'You solve chess puzzles by picking one legal move at a time. Use only the position and the legal moves given in the prompt; do not pretend to have engine analysis or outside knowledge. Give exactly one move.'

    def current_observation(self, state):
        return state.scratch.get('observation') or state.task.inputs['observation']

    def board_extras(self, observation):
        return ''

    def legal_moves_text(self, observation):
        return 'Legal moves:\n' + '\n'.join((f"- [{m['uci']}] SAN={m['san']}" for m in observation['legal_moves']))

    def observation_text(self, observation):
        lines = ['Task: solve the chess puzzle one move at a time.', 'Side to move: ' + observation['side_to_move'].capitalize(), 'FEN: ' + observation['fen'], 'Board:', observation['board']]
        extras = self.board_extras(observation)
        if extras:
            lines.append(extras)
        if observation.get('last_opponent_move'):
            lines.append('Last opponent reply: ' + observation['last_opponent_move'])
        if observation.get('accepted_moves'):
            lines.append('Your accepted moves so far: ' + ', '.join(observation['accepted_moves']))
        lines.append('Puzzle move number: ' + str(observation['move_number']))
        lines.append(self.legal_moves_text(observation))
        return '\n'.join(lines)

    def user_message(self, observation_text):
        return 'Solve the current chess puzzle position.\n\n' + observation_text + '\n\nGive exactly one move as <move>uci</move>, for example <move>e2e4</move>.\nNo explanation.'

    def first_user_message(self, task, initial_results):
        return self.user_message(self.observation_text(task.inputs['observation']))

    def generation_settings(self, state):
        moves = [m['uci'] for m in self.current_observation(state)['legal_moves']]
        return GenerationSettings(max_new_tokens=16, choices=[f'<move>{m}</move>' for m in moves])

    def manage_context(self, messages, state):
        if state.turn == 0:
            return messages
        text = self.observation_text(self.current_observation(state))
        nudge = state.scratch.pop('nudge', None)
        if nudge:
            text = text.rstrip() + '\n\nFeedback from the verifier:\n' + nudge
        kept = [m for m in messages if not (m.role == 'user' and m.kind == 'text')]
        return kept + [Message('user', self.user_message(text))]

    def extract_move(self, reply, state):
        """One UCI move, or a sentinel naming why there is none."""
        for pattern in PATTERNS:
            moves = []
            for match in pattern.finditer(reply):
                move = match.group(1).lower()
                if move not in moves:
                    moves.append(move)
            if len(moves) == 1:
                return moves[0]
            if moves:
                return '__ambiguous_multiple_moves__'
        return '__no_move__'

    def parse(self, reply, state):
        move = self.extract_move(reply, state)
        if move.startswith('__'):
            return FormatError(move)
        return ToolCalls([ToolCall('move', {'move': move, 'played': list(state.scratch.get('accepted', []))})])

    def format_nudge(self, parsed):
        return f'The verifier could not read exactly one UCI move from "{parsed}". Reply with exactly one move, for example <move>e2e4</move>, and no explanation.'

    def illegal_nudge(self, move):
        return f'The move "{move}" is not legal in the current position. Pick one of the listed legal moves and reply only as <move>uci</move>.'

    def error_feedback(self, error, state):
        if state.format_errors > self.format_retries:
            return None
        state.scratch['nudge'] = self.format_nudge(error.message)
        return state.scratch['nudge']

    def format_tool_result(self, result, state):
        outcome = result.meta.get('outcome')
        scratch = state.scratch
        if outcome in ('continue', 'solved', 'failed'):
            scratch.setdefault('line', []).append(result.meta.get('move', ''))
        if outcome == 'continue':
            scratch.setdefault('accepted', []).append(result.meta['move'])
            scratch['observation'] = result.meta['observation']
            return result.output
        if outcome == 'illegal' or outcome == 'unreadable':
            scratch['illegal'] = scratch.get('illegal', 0) + 1
            if scratch['illegal'] > self.illegal_retries:
                scratch['done'] = True
                return 'Puzzle failed: the move was illegal in the current position.'
            scratch['nudge'] = self.illegal_nudge(result.meta.get('move', ''))
            return scratch['nudge']
        scratch['done'] = True
        return result.output

    def should_stop(self, state):
        return bool(state.scratch.get('done')) or state.turn >= self.max_turns

    def extract_answer(self, state):
        line = state.scratch.get('line', [])
        return ' '.join(line) if line else None
