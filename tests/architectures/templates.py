"""Chat templates with the structure of the real models' published ones (roles, special tokens, the
``tools`` branch, the generation prompt), so serving is tested on what those models ship.

Written for these tests (not copied); each renders with or without ``tools`` defined.
"""

LLAMA3 = (
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{%- if tools is defined and tools %}{{- 'Environment: ipython\\n\\nYou have access to these functions:\\n' }}"
    "{%- for t in tools %}{{- t | tojson(indent=4) }}{{- '\\n\\n' }}{%- endfor %}{%- endif %}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'tool' or message['role'] == 'ipython' %}"
    "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message['content'] | string + '<|eot_id|>' }}"
    "{%- else %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim"
    " + '<|eot_id|>' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

MISTRAL = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if tools is defined and tools and loop.last %}"
    "{{- '[AVAILABLE_TOOLS] ' + tools | tojson + '[/AVAILABLE_TOOLS]' }}{%- endif %}"
    "{{- '[INST] ' + message['content'] + '[/INST]' }}"
    "{%- elif message['role'] == 'assistant' %}{{- ' ' + message['content'] + eos_token }}"
    "{%- elif message['role'] == 'system' %}{{- '[INST] ' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- raise_exception('Only user, system and assistant roles are supported') }}{%- endif %}"
    "{%- endfor %}"
)

QWEN = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n# Tools\\n\\nYou may call one or more functions.\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nReturn a JSON object inside <tool_call></tool_call> tags.<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

PHI3 = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)

# Phi-4-mini: tools travel in the system turn between <|tool|> and <|/tool|>.
PHI4_MINI = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>'"
    " + '<|end|>' }}"
    "{% elif message['role'] == 'system' and tools is defined and tools %}"
    "{{ '<|system|>' + message['content'] + '<|tool|>' + tools | tojson + '<|/tool|>' + '<|end|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}"
)

GRANITE = (
    "{%- if messages[0]['role'] == 'system' %}{%- set system_message = messages[0]['content'] %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = 'Knowledge Cutoff Date: April 2024.\\nYou are Granite, developed by IBM.' %}"
    "{%- if tools is defined and tools %}"
    "{%- set system_message = system_message + ' You are a helpful AI assistant with access to the following tools.' %}"
    "{%- endif %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- '<|start_of_role|>system<|end_of_role|>' + system_message + '<|end_of_text|>\\n' }}"
    "{%- if tools is defined and tools %}"
    "{{- '<|start_of_role|>available_tools<|end_of_role|>' }}{{- tools | tojson(indent=4) }}"
    "{{- '<|end_of_text|>\\n' }}{%- endif %}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'tool' %}"
    "{{- '<|start_of_role|>tool_response<|end_of_role|>' + message['content'] + '<|end_of_text|>\\n' }}"
    "{%- else %}{{- '<|start_of_role|>' + message['role'] + '<|end_of_role|>' + message['content']"
    " + '<|end_of_text|>\\n' }}{%- endif %}"
    "{%- if loop.last and add_generation_prompt %}{{- '<|start_of_role|>assistant<|end_of_role|>' }}{%- endif %}"
    "{%- endfor %}"
)

# SmolLM3: a metadata header in the system turn, /think and /no_think flags, XML-wrapped tools.
SMOLLM3 = (
    "{%- set reasoning_mode = '/think' %}"
    "{%- if messages[0]['role'] == 'system' and '/no_think' in messages[0]['content'] %}"
    "{%- set reasoning_mode = '/no_think' %}{%- endif %}"
    "{{- '<|im_start|>system\\n' }}"
    "{{- '## Metadata\\n\\nKnowledge Cutoff Date: June 2025\\nReasoning Mode: ' + reasoning_mode + '\\n\\n' }}"
    "{{- '## Custom Instructions\\n\\n' }}"
    "{%- if messages[0]['role'] == 'system' %}{{- messages[0]['content'] | replace('/no_think', '')"
    " | replace('/think', '') | trim }}{%- endif %}"
    "{%- if tools is defined and tools %}"
    "{{- '\\n\\n### Tools\\n\\n<tools>\\n' }}{%- for tool in tools %}{{- tool | tojson }}\\n{%- endfor %}"
    "{{- '</tools>' }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- '<|im_start|>user\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- elif message['role'] == 'tool' %}"
    "{{- '<|im_start|>user\\n<tool_response>' + message['content'] + '</tool_response><|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if reasoning_mode == '/no_think' %}{{- '<think>\\n\\n</think>\\n' }}{%- endif %}{%- endif %}"
)
