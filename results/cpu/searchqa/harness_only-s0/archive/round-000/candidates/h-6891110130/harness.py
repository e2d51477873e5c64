"""Search-QA h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol scaffolding
for a 135M model (a worked exchange, search/answer tag prefills).

Generated: h0.py plus the catalogue mechanisms few_shot_example, phase_prefill
(whalekit/domains/searchqa/mechanisms.py), applied in that order by `python -m whalekit.compositions`.
Do not edit: change the composition or the mechanisms and regenerate; tests/test_cpu_start.py checks it."""
import json
import re
from whalekit.harness import FinalAnswer, FormatError, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall
from whalekit.types import Message
SEARCH = re.compile('<search>(.*?)</search>', re.S)

def innermost_answer(text):
    """The text between the last </answer> and the nearest <answer> before it, or None."""
    close = text.rfind('</answer>')
    start = text.rfind('<answer>', 0, close) if close >= 0 else -1
    return text[start + len('<answer>'):close].strip() if start >= 0 else None

class SearchH0(Harness):
    name = 'searchqa-h0'
    max_turns = 6
    top_k = 1
    max_doc_tokens = 200
    max_new_tokens = 256

    def system_prompt(self, task):
        return 'Answer factual questions using search when needed.\n\nTool: search(query) looks up relevant information and returns exactly one passage. To call it, write <search>your query</search>; the result comes back in the next message.'

    def first_user_message(self, task, initial_results):
        shown = getattr(self, 'docs_shown', 5)
        cut = getattr(self, 'doc_chars', 100000)
        lines = []
        for result in initial_results:
            for i, d in enumerate(result.meta.get('documents', [])[:shown], 1):
                lines.append(f"[{i}] {d['title']}: {d['text'][:cut]}")
        found = '\n'.join(lines) or '(no documents found)'
        return f"Search results for the question:\n{found}\n\nQuestion: {task.inputs['question']}"

    def generation_settings(self, state):
        searched = state.tool_calls > 0 or getattr(self, 'forced_search', False)
        last_turn = state.turn + 1 >= self.max_turns
        prefill = '<answer>' if searched or last_turn else '<search>'
        return GenerationSettings(max_new_tokens=32, stop=['</search>', '</answer>', '\n'], prefill=prefill)

    def parse(self, reply, state):
        match = SEARCH.search(reply)
        if match:
            return ToolCalls([ToolCall('search', {'query': match.group(1).strip(), 'k': self.top_k, 'max_doc_tokens': self.max_doc_tokens})])
        answer = innermost_answer(reply)
        if answer is None:
            return FormatError('no closed <answer>...</answer> in the reply')
        return FinalAnswer(answer)

    def error_feedback(self, error, state):
        if state.format_errors >= 2:
            return None
        return 'Reply with exactly one line, either <search>name of the person or place</search> or <answer>short answer</answer>. For example: <search>' + state.task.inputs['question'] + '</search>'

    def format_tool_result(self, result, state):
        documents = result.meta.get('documents', [])
        if not documents:
            return result.output
        shown = documents[:getattr(self, 'docs_shown', len(documents))]
        cut = getattr(self, 'doc_chars', 100000)
        return '\n\n'.join((f"[{i}] {d['title']}: {d['text'][:cut]}" for i, d in enumerate(shown, 1)))

    def extract_answer(self, state):
        if state.final_answer is not None:
            return state.final_answer
        return innermost_answer(state.last_reply)

    def few_shot(self, task):
        return [Message('user', 'Question: In which city was Anna Brel born?', kind='few_shot'), Message('assistant', '<search>Anna Brel</search>', kind='few_shot'), Message('user', '[1] Anna Brel: Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin.', kind='few_shot'), Message('assistant', '<answer>Ostin</answer>', kind='few_shot')]
    docs_shown = 2

    def initial_tool_calls(self, task):
        return [ToolCall('search', {'query': task.inputs['question'], 'k': getattr(self, 'docs_shown', 5)})]
    forced_search = True
