"""Math h0_cpu: the cpu preset's starting harness, the authors' h0 plus declared protocol scaffolding
for a 135M model (a worked exchange, a boxed-answer prefill after a tool output).

Generated: h0.py plus the catalogue mechanisms few_shot_worked_example, boxed_prefill_after_output
(whalekit/domains/math/mechanisms.py), applied in that order by `python -m whalekit.search.compositions`.
Do not edit: change the composition or the mechanisms and regenerate; tests/test_cpu_start.py checks it."""
import re
from whalekit.harness import FinalAnswer, GenerationSettings, Harness, ToolCalls
from whalekit.types import ToolCall
from whalekit.types import Message
CODE_BLOCK = re.compile('```(?:python|py)[ \\t]*\\n(.*?)(?:```|$)', re.S)
FENCED = re.compile('```python(.*?)```', re.S)

def last_boxed(text):
    """Contents of the last \\boxed{...} with balanced braces; None if there is none closed."""
    start = text.rfind('\\boxed{')
    if start < 0:
        return None
    depth, begin = (1, start + len('\\boxed{'))
    for i in range(begin, len(text)):
        if text[i] == '{':
            depth += 1
        elif text[i] == '}':
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None

class MathH0(Harness):
    name = 'math-h0'
    max_turns = 2
    max_new_tokens = 256
    first_prefill = ''
    answer_prefill = 'The answer is \\boxed{'
    output_chars = 100000

    def system_prompt(self, task):
        return 'Tool: code_interpreter(code) runs Python code and returns what it printed. To call it, write the code in a ```python block; the output comes back in the next message.'

    def first_user_message(self, task, initial_results):
        return task.inputs['question'] + "\nThe answer format must be: \\boxed{'The final answer goes here.'}"

    def generation_settings(self, state):
        last = state.messages[-1] if state.messages else None
        prefill = self.first_prefill if state.turn == 0 else ''
        if last is not None and last.kind == 'tool_result' and self.answer_prefill:
            prefill = self.answer_prefill
        stop = ['}'] if prefill.rstrip().endswith('{') else ['\n```\n', '```output']
        return GenerationSettings(max_new_tokens=self.max_new_tokens, stop=stop, prefill=prefill)

    def normalise_code(self, code):
        inner = FENCED.findall(code)
        if inner:
            code = inner[0].strip()
        lines = code.split('\n')
        for i in range(len(lines) - 1, -1, -1):
            if lines[i] == '':
                continue
            if not lines[i].startswith('print'):
                lines[i] = f'print({lines[i]})'
            break
        return '\n'.join(lines)

    def parse(self, reply, state):
        code = CODE_BLOCK.search(reply)
        if code and code.group(1).strip():
            return ToolCalls([ToolCall('python', {'code': self.normalise_code(code.group(1))})])
        return FinalAnswer(reply)

    def format_tool_result(self, result, state):
        text = result.output
        if not result.ok and (not text.strip()):
            text = 'no stdout here'
        return '<tool_response>\n' + text[-self.output_chars:] + '\n</tool_response>'

    def extract_answer(self, state):
        replies = '\n'.join((m.content for m in state.messages if m.role == 'assistant' and m.kind != 'few_shot'))
        if state.final_answer is not None and state.final_answer not in replies:
            replies += '\n' + state.final_answer
        boxed = last_boxed(replies)
        return None if boxed is None else '\\boxed{' + boxed + '}'

    def few_shot(self, task):
        return [Message('user', 'What is 12 * 7 + 5?', kind='few_shot'), Message('assistant', '```python\nprint(12 * 7 + 5)\n```', kind='few_shot'), Message('user', '<tool_response>\n89\n</tool_response>', kind='few_shot'), Message('assistant', 'The answer is \\boxed{89}.', kind='few_shot')]
