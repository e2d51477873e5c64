"""Search-QA h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol scaffolding
for a 135M model (a worked exchange, search/answer tag prefills).

Generated: h0.py plus the catalogue mechanisms few_shot_example, phase_prefill
(whalekit/domains/searchqa/mechanisms.py), applied in that order by `python -m whalekit.search.compositions`.
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
    max_turns = 2
    top_k = 1
    max_doc_tokens = 200
    max_new_tokens = 256

    def system_prompt(self, task):
        return 'Answer factual questions using search when needed.\n\nTool: search(query) looks up relevant information and returns exactly one passage. To call it, write <search>your query</search>; the result comes back in the next message.'

    def first_user_message(self, task, initial_results):
        return 'Question: ' + task.inputs['question'] + '\nUse the search tool if you need it. Put only the final answer inside <answer>...</answer>.'

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
        return None

    def format_tool_result(self, result, state):
        documents = result.meta.get('documents', [])
        if not result.ok:
            text = 'Error: ' + result.output
        elif not documents:
            text = 'No search results found.'
        else:
            text = '\n'.join((f"Doc {i} (Title: {d['title']})\n{d['text']}\n" for i, d in enumerate(documents[:self.top_k], 1))).strip()
        return '<tool_response>\n' + json.dumps({'result': text}, ensure_ascii=False) + '\n</tool_response>'

    def extract_answer(self, state):
        if state.final_answer is not None:
            return state.final_answer
        return innermost_answer(state.last_reply)

    def few_shot(self, task):
        return [Message('user', 'Question: In which city was Anna Brel born?', kind='few_shot'), Message('assistant', '<search>Anna Brel</search>', kind='few_shot'), Message('user', '[1] Anna Brel: Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin.', kind='few_shot'), Message('assistant', '<answer>Ostin</answer>', kind='few_shot')]
