"""Search-QA h0, after the authors' minimal Search-R1 harness (krafton-ai/WHALE,
domains/search_qa/environments/search_r1/base_harness.py and stupid_harness.py).

A one-line system prompt, the question with one line of instruction, and one search tool
that returns the top-1 passage cut to 200 tokens; only the first query of a turn is
run. At most 2 turns; the episode ends at the first turn without a search; the answer
is the innermost closed <answer>...</answer> of the last turn. SmolLM2's chat template
has no tool calling, so a text protocol stands in for the authors' tool schema: the
model writes <search>query</search> (generation stops there) and the result comes back
as the tool message the authors' template would render, <tool_response> around the
JSON the tool returns."""
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
        shown = getattr(self, 'docs_shown', 5)
        cut = getattr(self, 'doc_chars', 100000)
        lines = []
        for result in initial_results:
            for i, d in enumerate(result.meta.get('documents', [])[:shown], 1):
                lines.append(f"[{i}] {d['title']}: {d['text'][:cut]}")
        found = '\n'.join(lines) or '(no documents found)'
        return f"Search results for the question:\n{found}\n\nQuestion: {task.inputs['question']}"

    def generation_settings(self, state):
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=['</search>'])

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
        if not documents:
            return result.output
        shown = documents[:getattr(self, 'docs_shown', len(documents))]
        cut = getattr(self, 'doc_chars', 100000)
        return '\n\n'.join((f"[{i}] {d['title']}: {d['text'][:cut]}" for i, d in enumerate(shown, 1)))

    def extract_answer(self, state):
        if state.final_answer is not None:
            return state.final_answer
        text = re.sub('<[^>]*>', ' ', state.last_reply).strip()
        return text.split('\n')[0].strip(' .!') or None

    def few_shot(self, task):
        return [Message('user', 'Question: In which city was Anna Brel born?', kind='few_shot'), Message('assistant', '<search>Anna Brel</search>', kind='few_shot'), Message('user', '[1] Anna Brel: Anna Brel (born 1901) was a poet. Brel was born in the city of Ostin.', kind='few_shot'), Message('assistant', '<answer>Ostin</answer>', kind='few_shot')]

    def initial_tool_calls(self, task):
        return [ToolCall('search', {'query': task.inputs['question'], 'k': getattr(self, 'docs_shown', 5)})]
    forced_search = True
    docs_shown = 2
