/* Chat template tests.
 *
 * The conversation, the template strings and the expected prompts below are transcribed from llama.cpp's
 * tests/test-chat-template.cpp (ggml-org/llama.cpp @ 03f94f19a2c4c9d039fa1a84838fe3e2110cc28d, the
 * "template_str" and "expected_output" fields: real tokenizer.chat_template values of the named models, and
 * the prompt llama.cpp's llm_chat_apply_template produces after detecting the template from that text).
 * Each case runs detection on the real template text and then formats the conversation, as that test does.
 * Where llama.cpp has no case (llama2-sys, mistral-v7-tekken, zephyr), the expected prompt is written by hand
 * from llama.cpp's format in src/llama-chat.cpp; zephyr-hf's was rendered by Python jinja2 3.1.2 from the
 * real HuggingFaceH4/zephyr-7b-beta (= TinyLlama-1.1B-Chat) template with trim_blocks and lstrip_blocks, as
 * transformers' apply_chat_template renders it (eos_token "</s>").
 *
 * The staged ggml-vocab-phi-3.gguf carries Phi-3's real tokenizer.chat_template (detected here), and its and
 * the Llama vocabulary's special tokens check that the markers the templates write are the exact texts of
 * those tokens. */
#include "tokenizer/chat.h"

#include <string.h>

#include "core/mem.h"
#include "format/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

static const struct chat_message conversation[] = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
#define N_CONV ((int)(sizeof(conversation) / sizeof(conversation[0])))

struct llama_cpp_case {
    const char *model;
    const char *tmpl; // the model's tokenizer.chat_template
    enum chat_template_id want_id;
    const char *want; // add_generation_prompt = true
};

/* Phi-3 (mini, small, medium, vision) expects the same prompt from four different templates. */
#define PHI3_WANT                                                                                            \
    "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "             \
    "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   "                     \
    "<|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"

static const struct llama_cpp_case llama_cpp_cases[] = {
    {
        "teknium/OpenHermes-2.5-Mistral-7B",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
        "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% "
        "endif %}",
        CHAT_TEMPLATE_CHATML,
        "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_"
        "start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>"
        "assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
        "question<|im_end|>\n<|im_start|>assistant\n",
    },
    {
        "mistralai/Mistral-7B-Instruct-v0.2 (old, pre-v1, no system prompt)",
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 "
        "== "
        "0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% "
        "endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
        "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ "
        "raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}",
        CHAT_TEMPLATE_LLAMA2,
        "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
        "assistant   </s>[INST] Another question [/INST]",
    },
    {
        "TheBloke/FusionNet_34Bx2_MoE-AWQ",
        "{%- for idx in range(0, messages|length) -%}\n{%- if messages[idx]['role'] == 'user' -%}\n{%- if "
        "idx "
        "> 1 -%}\n{{- bos_token + '[INST] ' + messages[idx]['content'] + ' [/INST]' -}}\n{%- else -%}\n{{- "
        "messages[idx]['content'] + ' [/INST]' -}}\n{%- endif -%}\n{% elif messages[idx]['role'] == 'system' "
        "%}\n{{- '[INST] <<SYS>>\\n' + messages[idx]['content'] + '\\n<</SYS>>\\n\\n' -}}\n{%- elif "
        "messages[idx]['role'] == 'assistant' -%}\n{{- ' '  + messages[idx]['content'] + ' ' + eos_token "
        "-}}\n{% endif %}\n{% endfor %}",
        CHAT_TEMPLATE_LLAMA2_SYS_BOS,
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s><s>[INST] Who are "
        "you [/INST]   I am an assistant   </s><s>[INST] Another question [/INST]",
    },
    {
        "bofenghuang/vigogne-2-70b-chat",
        "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
        "system_message = messages[0]['content'] %}{% elif true == true and not '<<SYS>>' in "
        "messages[0]['content'] %}{% set loop_messages = messages %}{% set system_message = 'Vous êtes "
        "Vigogne, un assistant IA créé par Zaion Lab. Vous suivez extrêmement bien les instructions. Aidez "
        "autant que vous le pouvez.' %}{% else %}{% set loop_messages = messages %}{% set system_message = "
        "false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != "
        "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
        "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false "
        "%}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% "
        "else "
        "%}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "content.strip() + ' [/INST]' }}{% elif message['role'] == 'system' %}{{ '<<SYS>>\\n' + "
        "content.strip() + '\\n<</SYS>>\\n\\n' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
        "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}",
        CHAT_TEMPLATE_LLAMA2_SYS_STRIP,
        "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are "
        "you "
        "[/INST]I am an assistant</s>[INST] Another question [/INST]",
    },
    {
        "google/gemma-7b-it",
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif "
        "%}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
        "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif "
        "%}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = "
        "message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
        "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% "
        "endif "
        "%}",
        CHAT_TEMPLATE_GEMMA,
        "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model\nHi "
        "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an "
        "assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n",
    },
    {
        "Llama-3",
        "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
        "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + "
        "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ "
        "content "
        "}}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}",
        CHAT_TEMPLATE_LLAMA3,
        "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
        "assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are "
        "you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
        "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
        "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    },
    {
        "Phi-3-mini",
        "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' "
        "+ message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == "
        "'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
        CHAT_TEMPLATE_PHI3,
        PHI3_WANT,
    },
    {
        "Phi-3-small",
        "{{ bos_token }}{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + "
        "message['content'] + '<|end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' "
        "}}{% else %}{{ eos_token }}{% endif %}",
        CHAT_TEMPLATE_PHI3,
        PHI3_WANT,
    },
    {
        "Phi-3-medium",
        "{% for message in messages %}{% if (message['role'] == 'user') %}{{'<|user|>' + '\n' + "
        "message['content'] + '<|end|>' + '\n' + '<|assistant|>' + '\n'}}{% elif (message['role'] == "
        "'assistant') %}{{message['content'] + '<|end|>' + '\n'}}{% endif %}{% endfor %}",
        CHAT_TEMPLATE_PHI3,
        PHI3_WANT,
    },
    {
        "Phi-3-vision",
        "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\n' + message['content'] + "
        "'<|end|>\n' }}{% endfor %}{% if add_generation_prompt and messages[-1]['role'] != 'assistant' %}{{- "
        "'<|assistant|>\n' -}}{% endif %}",
        CHAT_TEMPLATE_PHI3,
        PHI3_WANT,
    },
    {
        "mistralai/Mistral-7B-Instruct-v0.2 (mistralai 'v1' template with a system prompt)",
        "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n "
        "   {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages "
        "%}\n{%- "
        "endif %}\n\n{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if (message['role'] == "
        "'user') != (loop.index0 % 2 == 0) %}\n        {{- raise_exception('After the optional system "
        "message, conversation roles must alternate user/assistant/user/assistant/...') }}\n    {%- endif "
        "%}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is "
        "defined "
        "%}\n            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n   "
        " "
        "    {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif "
        "%}\n    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + "
        "eos_token}}\n    {%- else %}\n        {{- raise_exception('Only user and assistant roles are "
        "supported, with the exception of an initial optional system message!') }}\n    {%- endif %}\n{%- "
        "endfor %}\n",
        CHAT_TEMPLATE_MISTRAL_V1,
        " [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I "
        "am "
        "an assistant   </s> [INST] Another question [/INST]",
    },
    {
        "Mistral-Large-Instruct-2407 (mistralai 'v3' template; modified to have system prompt at start)",
        "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = "
        "messages[0][\"content\"] "
        "%}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages "
        "%}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n{%- "
        "set "
        "user_messages = loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#- This "
        "block checks for alternating user/assistant messages, skipping tool calling messages #}\n{%- set ns "
        "= namespace() %}\n{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n    {%- if not "
        "(message.role == \"tool\" or message.role == \"tool_results\" or (message.tool_calls is defined and "
        "message.tool_calls is not none)) %}\n        {%- if (message[\"role\"] == \"user\") != (ns.index % "
        "2 "
        "== 0) %}\n            {{- raise_exception(\"After the optional system message, conversation roles "
        "must alternate user/assistant/user/assistant/...\") }}\n        {%- endif %}\n        {%- set "
        "ns.index = ns.index + 1 %}\n    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in "
        "loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and "
        "(message == user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS] [\" }}\n            {%- for "
        "tool in tools %}\n                {%- set tool = tool.function %}\n                {{- '{\"type\": "
        "\"function\", \"function\": {' }}\n                {%- for key, val in tool.items() if key != "
        "\"return\" %}\n                    {%- if val is string %}\n                        {{- '\"' + key "
        "+ "
        "'\": \"' + val + '\"' }}\n                    {%- else %}\n                        {{- '\"' + key + "
        "'\": ' + val|tojson }}\n                    {%- endif %}\n                    {%- if not loop.last "
        "%}\n                        {{- \", \" }}\n                    {%- endif %}\n                {%- "
        "endfor %}\n                {{- \"}}\" }}\n                {%- if not loop.last %}\n                 "
        "  "
        " {{- \", \" }}\n                {%- else %}\n                    {{- \"]\" }}\n                {%- "
        "endif %}\n            {%- endfor %}\n            {{- \"[/AVAILABLE_TOOLS]\" }}\n            {%- "
        "endif "
        "%}\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST] \" + "
        "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n          "
        " "
        " {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif "
        "message.tool_calls is defined and message.tool_calls is not none %}\n        {{- \"[TOOL_CALLS] [\" "
        "}}\n        {%- for tool_call in message.tool_calls %}\n            {%- set out = "
        "tool_call.function|tojson %}\n            {{- out[:-1] }}\n            {%- if not tool_call.id is "
        "defined or tool_call.id|length != 9 %}\n                {{- raise_exception(\"Tool call IDs should "
        "be "
        "alphanumeric strings with length 9!\") }}\n            {%- endif %}\n            {{- ', \"id\": \"' "
        "+ "
        "tool_call.id + '\"}' }}\n            {%- if not loop.last %}\n                {{- \", \" }}\n       "
        "  "
        "   {%- else %}\n                {{- \"]\" + eos_token }}\n            {%- endif %}\n        {%- "
        "endfor "
        "%}\n    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- \" \" + "
        "message[\"content\"]|trim + "
        "eos_token}}\n    {%- elif message[\"role\"] == \"tool_results\" or message[\"role\"] == \"tool\" "
        "%}\n "
        "       {%- if message.content is defined and message.content.content is defined %}\n            {%- "
        "set content = message.content.content %}\n        {%- else %}\n            {%- set content = "
        "message.content %}\n        {%- endif %}\n        {{- '[TOOL_RESULTS] {\"content\": ' + "
        "content|string + \", \" }}\n        {%- if not message.tool_call_id is defined or "
        "message.tool_call_id|length != 9 %}\n            {{- raise_exception(\"Tool call IDs should be "
        "alphanumeric strings with length 9!\") }}\n        {%- endif %}\n        {{- '\"call_id\": \"' + "
        "message.tool_call_id + '\"}[/TOOL_RESULTS]' }}\n    {%- else %}\n        {{- raise_exception(\"Only "
        "user and assistant roles are supported, with the exception of an initial optional system "
        "message!\") }}\n    {%- endif %}\n{%- endfor %}\n",
        CHAT_TEMPLATE_MISTRAL_V3,
        "[INST] You are a helpful assistant\n\nHello[/INST] Hi there</s>[INST] Who are you[/INST] I am an "
        "assistant</s>[INST] Another question[/INST]",
    },
    {
        "Mistral-Nemo-Instruct-2407 (mistralai 'v3-tekken' template; modified to have system prompt at "
        "start)",
        "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = "
        "messages[0][\"content\"] "
        "%}\n    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages "
        "%}\n{%- endif %}\n{%- if not tools is defined %}\n    {%- set tools = none %}\n{%- endif %}\n{%- "
        "set "
        "user_messages = loop_messages | selectattr(\"role\", \"equalto\", \"user\") | list %}\n\n{#- This "
        "block checks for alternating user/assistant messages, skipping tool calling messages #}\n{%- set ns "
        "= namespace() %}\n{%- set ns.index = 0 %}\n{%- for message in loop_messages %}\n    {%- if not "
        "(message.role == \"tool\" or message.role == \"tool_results\" or (message.tool_calls is defined and "
        "message.tool_calls is not none)) %}\n        {%- if (message[\"role\"] == \"user\") != (ns.index % "
        "2 "
        "== 0) %}\n            {{- raise_exception(\"After the optional system message, conversation roles "
        "must alternate user/assistant/user/assistant/...\") }}\n        {%- endif %}\n        {%- set "
        "ns.index = ns.index + 1 %}\n    {%- endif %}\n{%- endfor %}\n\n{{- bos_token }}\n{%- for message in "
        "loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n        {%- if tools is not none and "
        "(message == user_messages[-1]) %}\n            {{- \"[AVAILABLE_TOOLS][\" }}\n            {%- for "
        "tool in tools %}\n                {%- set tool = tool.function %}\n                {{- '{\"type\": "
        "\"function\", \"function\": {' }}\n                {%- for key, val in tool.items() if key != "
        "\"return\" %}\n                    {%- if val is string %}\n                        {{- '\"' + key "
        "+ "
        "'\": \"' + val + '\"' }}\n                    {%- else %}\n                        {{- '\"' + key + "
        "'\": ' + val|tojson }}\n                    {%- endif %}\n                    {%- if not loop.last "
        "%}\n                        {{- \", \" }}\n                    {%- endif %}\n                {%- "
        "endfor %}\n                {{- \"}}\" }}\n                {%- if not loop.last %}\n                 "
        "  "
        " {{- \", \" }}\n                {%- else %}\n                    {{- \"]\" }}\n                {%- "
        "endif %}\n            {%- endfor %}\n            {{- \"[/AVAILABLE_TOOLS]\" }}\n            {%- "
        "endif "
        "%}\n        {%- if loop.last and system_message is defined %}\n            {{- \"[INST]\" + "
        "system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n        {%- else %}\n          "
        "  "
        "{{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n    {%- elif "
        "(message.tool_calls is defined and message.tool_calls is not none) %}\n        {{- "
        "\"[TOOL_CALLS][\" "
        "}}\n        {%- for tool_call in message.tool_calls %}\n            {%- set out = "
        "tool_call.function|tojson %}\n            {{- out[:-1] }}\n            {%- if not tool_call.id is "
        "defined or tool_call.id|length != 9 %}\n                {{- raise_exception(\"Tool call IDs should "
        "be "
        "alphanumeric strings with length 9!\") }}\n            {%- endif %}\n            {{- ', \"id\": \"' "
        "+ "
        "tool_call.id + '\"}' }}\n            {%- if not loop.last %}\n                {{- \", \" }}\n       "
        "  "
        "   {%- else %}\n                {{- \"]\" + eos_token }}\n            {%- endif %}\n        {%- "
        "endfor "
        "%}\n    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- message[\"content\"] + "
        "eos_token}}\n    {%- elif message[\"role\"] == \"tool_results\" or message[\"role\"] == \"tool\" "
        "%}\n "
        "       {%- if message.content is defined and message.content.content is defined %}\n            {%- "
        "set content = message.content.content %}\n        {%- else %}\n            {%- set content = "
        "message.content %}\n        {%- endif %}\n        {{- '[TOOL_RESULTS]{\"content\": ' + "
        "content|string "
        "+ \", \" }}\n        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 "
        "%}\n            {{- raise_exception(\"Tool call IDs should be alphanumeric strings with length "
        "9!\") "
        "}}\n        {%- endif %}\n        {{- '\"call_id\": \"' + message.tool_call_id + "
        "'\"}[/TOOL_RESULTS]' }}\n    {%- else %}\n        {{- raise_exception(\"Only user and assistant "
        "roles are supported, with the exception of an initial optional system message!\") }}\n    {%- endif "
        "%}\n{%- endfor %}\n",
        CHAT_TEMPLATE_MISTRAL_V3_TEKKEN,
        "[INST]You are a helpful assistant\n\nHello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an "
        "assistant   </s>[INST]Another question[/INST]",
    },
    {
        "mistralai/Mistral-Large-Instruct-2411 (mistralai 'v7' template)",
        "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
        "message['content'] + '[/INST]' }}{% elif message['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + "
        "message['content'] + '[/SYSTEM_PROMPT]' }}{% elif message['role'] == 'assistant' %}{{ ' ' + "
        "message['content'] + eos_token }}{% else %}{{ raise_exception('Only user, system and assistant "
        "roles "
        "are supported!') }}{% endif %}{% endfor %}",
        CHAT_TEMPLATE_MISTRAL_V7,
        "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] "
        "Who "
        "are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]",
    },
    {
        // Not a llama.cpp case: see the file comment.  Real newlines, as in the model's tokenizer_config.
        "HuggingFaceH4/zephyr-7b-beta, TinyLlama/TinyLlama-1.1B-Chat-v1.0",
        "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
        "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' + "
        "message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  "
        "+ message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ "
        "'<|assistant|>' }}\n{% endif %}\n{% endfor %}",
        CHAT_TEMPLATE_ZEPHYR_HF,
        "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
        "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   "
        "</s>\n<|user|>\nAnother question</s>\n<|assistant|>\n",
    },
};

/* Templates llama.cpp has no test case for: expected prompts written by hand from its formats. */
static const struct {
    enum chat_template_id id;
    const char *want;
} by_name_cases[] = {
    {CHAT_TEMPLATE_LLAMA2_SYS,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who are you "
     "[/INST]   I am an assistant   </s>[INST] Another question [/INST]"},
    {CHAT_TEMPLATE_MISTRAL_V7_TEKKEN,
     "[SYSTEM_PROMPT]You are a helpful assistant[/SYSTEM_PROMPT][INST]Hello[/INST]Hi there</s>[INST]Who are "
     "you[/INST]   I am an assistant   </s>[INST]Another question[/INST]"},
    {CHAT_TEMPLATE_ZEPHYR,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assistant|>\nHi "
     "there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an assistant   "
     "<|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
};

/* The llama.cpp case whose model name starts with prefix. */
static const struct llama_cpp_case *find_case(const char *prefix) {
    for (size_t i = 0; i < sizeof(llama_cpp_cases) / sizeof(llama_cpp_cases[0]); i++) {
        if (strncmp(llama_cpp_cases[i].model, prefix, strlen(prefix)) == 0)
            return &llama_cpp_cases[i];
    }
    return NULL;
}

static bool apply_is(enum chat_template_id t, const struct chat_message *m, int n, bool add_gen,
                     const char *want) {
    struct ci_err err = {0};
    char *out = NULL;
    size_t len = 0;
    enum ci_status st = chat_apply(t, m, n, add_gen, &out, &len, &err);
    bool ok = st == CI_OK && out && len == strlen(want) && strlen(out) == len && memcmp(out, want, len) == 0;
    if (!ok) {
        printf("    %s (add_gen %d): status %d (%s)\n      got  [%s]\n      want [%s]\n",
               chat_template_name(t), add_gen, (int)st, err.msg, out ? out : "(null)", want);
    }
    ci_free(out);
    return ok;
}

TEST(llama_cpp_cases) {
    for (size_t i = 0; i < sizeof(llama_cpp_cases) / sizeof(llama_cpp_cases[0]); i++) {
        const struct llama_cpp_case *c = &llama_cpp_cases[i];
        enum chat_template_id id = chat_template_detect(c->tmpl, strlen(c->tmpl));
        if (id != c->want_id) {
            TEST_FAILF("%s: detected %s, want %s", c->model, chat_template_name(id),
                       chat_template_name(c->want_id));
            continue;
        }
        if (!apply_is(id, conversation, N_CONV, true, c->want))
            TEST_FAILF("%s: wrong prompt", c->model);
    }
}

TEST(by_name_cases) {
    for (size_t i = 0; i < sizeof(by_name_cases) / sizeof(by_name_cases[0]); i++) {
        if (!apply_is(by_name_cases[i].id, conversation, N_CONV, true, by_name_cases[i].want))
            TEST_FAILF("%s: wrong prompt", chat_template_name(by_name_cases[i].id));
    }
}

/* Without a generation prompt, the templates that have one drop exactly that suffix; the [INST] families
 * have none and are unchanged. */
TEST(no_generation_prompt) {
    static const struct {
        enum chat_template_id id;
        const char *suffix;
    } with_suffix[] = {
        {CHAT_TEMPLATE_CHATML, "<|im_start|>assistant\n"},
        {CHAT_TEMPLATE_PHI3, "<|assistant|>\n"},
        {CHAT_TEMPLATE_ZEPHYR_HF, "<|assistant|>\n"},
        {CHAT_TEMPLATE_GEMMA, "<start_of_turn>model\n"},
        {CHAT_TEMPLATE_LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n"},
    };
    for (size_t i = 0; i < sizeof(with_suffix) / sizeof(with_suffix[0]); i++) {
        const char *full = NULL;
        for (size_t j = 0; j < sizeof(llama_cpp_cases) / sizeof(llama_cpp_cases[0]); j++) {
            if (llama_cpp_cases[j].want_id == with_suffix[i].id)
                full = llama_cpp_cases[j].want;
        }
        ASSERT(full != NULL);
        size_t nf = strlen(full), ns = strlen(with_suffix[i].suffix);
        ASSERT(nf > ns && strcmp(full + nf - ns, with_suffix[i].suffix) == 0);
        char want[2048];
        ASSERT(nf - ns < sizeof(want));
        memcpy(want, full, nf - ns);
        want[nf - ns] = '\0';
        CHECK(apply_is(with_suffix[i].id, conversation, N_CONV, false, want));
    }
    // The zephyr-hf rendering without the prompt is jinja2's too (see the file comment).
    CHECK(apply_is(CHAT_TEMPLATE_ZEPHYR_HF, conversation, N_CONV, false,
                   "<|system|>\nYou are a helpful assistant</s>\n<|user|>\nHello</s>\n<|assistant|>\nHi "
                   "there</s>\n<|user|>\nWho are you</s>\n<|assistant|>\n   I am an assistant   "
                   "</s>\n<|user|>\nAnother question</s>\n"));
    const struct llama_cpp_case *v7 = find_case("mistralai/Mistral-Large-Instruct-2411");
    const struct llama_cpp_case *l2 = find_case("mistralai/Mistral-7B-Instruct-v0.2 (old");
    ASSERT(v7 && l2);
    CHECK(apply_is(CHAT_TEMPLATE_MISTRAL_V7, conversation, N_CONV, false, v7->want));
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA2, conversation, N_CONV, false, l2->want));
}

TEST(single_user_message) {
    const struct chat_message m[] = {{"user", "Hi"}};
    CHECK(apply_is(CHAT_TEMPLATE_CHATML, m, 1, true,
                   "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"));
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA2, m, 1, true, "[INST] Hi [/INST]"));
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA2_SYS_BOS, m, 1, true, "[INST] Hi [/INST]"));
    CHECK(apply_is(CHAT_TEMPLATE_MISTRAL_V1, m, 1, true, " [INST] Hi [/INST]"));
    CHECK(apply_is(CHAT_TEMPLATE_MISTRAL_V3, m, 1, true, "[INST] Hi[/INST]"));
    CHECK(apply_is(CHAT_TEMPLATE_GEMMA, m, 1, true,
                   "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"));
    CHECK(
        apply_is(CHAT_TEMPLATE_LLAMA3, m, 1, true,
                 "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_"
                 "header_id|>\n\n"));
}

/* Gemma has no system role: llama.cpp folds the trimmed system texts into the next user turn, even when they
 * come later in the chat, concatenated, and writes nothing for whitespace-only ones. */
TEST(gemma_system_folding) {
    const struct chat_message m[] = {
        {"user", " A "}, {"assistant", "B"}, {"system", " S1 "}, {"system", "S2\n"}, {"user", "C"},
    };
    CHECK(
        apply_is(CHAT_TEMPLATE_GEMMA, m, 5, false,
                 "<start_of_turn>user\nA<end_of_turn>\n<start_of_turn>model\nB<end_of_turn>\n<start_of_turn>"
                 "user\nS1S2\n\nC<end_of_turn>\n"));
    const struct chat_message blank[] = {{"system", " \t\n"}, {"user", "C"}};
    CHECK(apply_is(CHAT_TEMPLATE_GEMMA, blank, 2, false, "<start_of_turn>user\nC<end_of_turn>\n"));
    // A system message after the last user turn has nowhere to go.
    const struct chat_message tail[] = {{"user", "C"}, {"system", "late"}};
    CHECK(apply_is(CHAT_TEMPLATE_GEMMA, tail, 2, false, "<start_of_turn>user\nC<end_of_turn>\n"));
}

/* Which templates trim: llama3 trims every content (all C-locale whitespace), chatml none. */
TEST(trimming) {
    const struct chat_message m[] = {{"user", "\t\v\f\r\n x y \n"}};
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA3, m, 1, false,
                   "<|start_header_id|>user<|end_header_id|>\n\nx y<|eot_id|>"));
    CHECK(apply_is(CHAT_TEMPLATE_CHATML, m, 1, false, "<|im_start|>user\n\t\v\f\r\n x y \n<|im_end|>\n"));
    const struct chat_message empty[] = {{"user", "   "}};
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA3, empty, 1, false,
                   "<|start_header_id|>user<|end_header_id|>\n\n<|eot_id|>"));
    // UTF-8 bytes (>= 0x80) are never whitespace.
    const struct chat_message utf8[] = {{"user", "\xc2\xa0h\xc3\xa9\xc2\xa0"}};
    CHECK(apply_is(CHAT_TEMPLATE_LLAMA3, utf8, 1, false,
                   "<|start_header_id|>user<|end_header_id|>\n\n\xc2\xa0h\xc3\xa9\xc2\xa0<|eot_id|>"));
}

static void expect_invalid(enum chat_template_id t, const struct chat_message *m, int n, const char *what) {
    struct ci_err err = {0};
    char *out = (char *)&err; // sentinel: must stay untouched
    size_t len = 12345;
    enum ci_status st = chat_apply(t, m, n, true, &out, &len, &err);
    if (st != CI_ERR_INVALID || err.code != CI_ERR_INVALID || err.msg[0] == '\0' || out != (char *)&err ||
        len != 12345)
        TEST_FAILF("%s: status %d, message '%s'", what, (int)st, err.msg);
    else if (!strstr(err.msg, what))
        TEST_FAILF("message '%s' does not mention '%s'", err.msg, what);
}

TEST(invalid_input) {
    const struct chat_message ok[] = {{"user", "hi"}};
    expect_invalid(CHAT_TEMPLATE_CHATML, NULL, 1, "at least one message");
    expect_invalid(CHAT_TEMPLATE_CHATML, ok, 0, "at least one message");
    expect_invalid(CHAT_TEMPLATE_CHATML, ok, -3, "at least one message");
    const struct chat_message tool[] = {{"user", "hi"}, {"tool", "{}"}};
    expect_invalid(CHAT_TEMPLATE_CHATML, tool, 2, "'tool'");
    const struct chat_message dev[] = {{"developer", "be nice"}};
    expect_invalid(CHAT_TEMPLATE_LLAMA3, dev, 1, "'developer'");
    const struct chat_message upper[] = {{"System", "x"}};
    expect_invalid(CHAT_TEMPLATE_GEMMA, upper, 1, "'System'");
    const struct chat_message empty_role[] = {{"", "x"}};
    expect_invalid(CHAT_TEMPLATE_PHI3, empty_role, 1, "role ''");
    const struct chat_message no_role[] = {{NULL, "x"}};
    expect_invalid(CHAT_TEMPLATE_CHATML, no_role, 1, "no role");
    const struct chat_message no_content[] = {{"user", "a"}, {"assistant", NULL}};
    expect_invalid(CHAT_TEMPLATE_CHATML, no_content, 2, "message 1 (assistant) has no content");
    expect_invalid(CHAT_TEMPLATE_UNKNOWN, ok, 1, "not a built-in template");
    expect_invalid(CHAT_TEMPLATE_COUNT, ok, 1, "not a built-in template");
    expect_invalid((enum chat_template_id) - 1, ok, 1, "not a built-in template");
}

TEST(out_of_memory) {
    const struct chat_message m[] = {{"user", "hello"}};
    struct ci_err err = {0};
    char *out = NULL;
    size_t len = 0;
    ci_mem_set_limit(ci_mem_in_use() + 8);
    enum ci_status st = chat_apply(CHAT_TEMPLATE_CHATML, m, 1, true, &out, &len, &err);
    ci_mem_set_limit(0);
    ASSERT_STATUS(st, CI_ERR_NOMEM);
    ASSERT(out == NULL && len == 0);
}

TEST(names) {
    for (int i = CHAT_TEMPLATE_UNKNOWN + 1; i < CHAT_TEMPLATE_COUNT; i++) {
        const char *name = chat_template_name((enum chat_template_id)i);
        ASSERT(name && strcmp(name, "unknown") != 0);
        ASSERT_EQ_I64(chat_template_from_name(name), i);
        // Detection of a bare name, as llama.cpp's does.
        ASSERT_EQ_I64(chat_template_detect(name, strlen(name)), i);
    }
    // llama.cpp's names, spelled as it spells them.
    static const struct {
        const char *name;
        enum chat_template_id id;
    } known[] = {
        {"chatml", CHAT_TEMPLATE_CHATML},
        {"llama2", CHAT_TEMPLATE_LLAMA2},
        {"llama2-sys", CHAT_TEMPLATE_LLAMA2_SYS},
        {"llama2-sys-bos", CHAT_TEMPLATE_LLAMA2_SYS_BOS},
        {"llama2-sys-strip", CHAT_TEMPLATE_LLAMA2_SYS_STRIP},
        {"mistral-v1", CHAT_TEMPLATE_MISTRAL_V1},
        {"mistral-v3", CHAT_TEMPLATE_MISTRAL_V3},
        {"mistral-v3-tekken", CHAT_TEMPLATE_MISTRAL_V3_TEKKEN},
        {"mistral-v7", CHAT_TEMPLATE_MISTRAL_V7},
        {"mistral-v7-tekken", CHAT_TEMPLATE_MISTRAL_V7_TEKKEN},
        {"phi3", CHAT_TEMPLATE_PHI3},
        {"zephyr", CHAT_TEMPLATE_ZEPHYR},
        {"gemma", CHAT_TEMPLATE_GEMMA},
        {"llama3", CHAT_TEMPLATE_LLAMA3},
        // llama.cpp sends template texts starting with "mistral" down its [INST] branch: plain llama2.
        {"mistral", CHAT_TEMPLATE_LLAMA2},
        {"mistral-instruct", CHAT_TEMPLATE_LLAMA2},
    };
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++) {
        if (chat_template_from_name(known[i].name) != known[i].id)
            TEST_FAILF("from_name(%s) = %s", known[i].name,
                       chat_template_name(chat_template_from_name(known[i].name)));
        if (chat_template_detect(known[i].name, strlen(known[i].name)) != known[i].id)
            TEST_FAILF("detect(%s) = %s", known[i].name,
                       chat_template_name(chat_template_detect(known[i].name, strlen(known[i].name))));
    }
    CHECK(chat_template_from_name(NULL) == CHAT_TEMPLATE_UNKNOWN);
    CHECK(chat_template_from_name("") == CHAT_TEMPLATE_UNKNOWN);
    CHECK(chat_template_from_name("ChatML") == CHAT_TEMPLATE_UNKNOWN);
    CHECK(chat_template_from_name("chatml ") == CHAT_TEMPLATE_UNKNOWN);
    CHECK(chat_template_from_name("phi4") == CHAT_TEMPLATE_UNKNOWN);             // llama.cpp's, not built in
    CHECK(chat_template_from_name("INVALID TEMPLATE") == CHAT_TEMPLATE_UNKNOWN); // llama.cpp's own probe
    CHECK(strcmp(chat_template_name(CHAT_TEMPLATE_UNKNOWN), "unknown") == 0);
    CHECK(strcmp(chat_template_name(CHAT_TEMPLATE_COUNT), "unknown") == 0);
    CHECK(strcmp(chat_template_name((enum chat_template_id) - 7), "unknown") == 0);
    CHECK(CHAT_TEMPLATE_DEFAULT == CHAT_TEMPLATE_CHATML);
}

/* Real templates of models whose format llama.cpp implements but cinfer does not (from the same llama.cpp
 * test) must come back UNKNOWN, not as the nearest built-in: phi-4 has <|im_start|> (chatml would be wrong),
 * GLM-Edge has <|user|>/<|assistant|> but no turn ends (zephyr would be wrong), and so on. */
TEST(detect_unsupported) {
    static const char *const tmpls[] = {
        // phi-4
        "{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' "
        "+ message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_"
        "sep|>' + message['content'] + '<|im_end|><|im_start|>assistant<|im_sep|>'}}{% elif (message['role'] "
        "== 'assistant') %}{{message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}",
        // GLMEdge
        "{% for item in messages %}{% if item['role'] == 'system' %}<|system|>\n{{ item['content'] }}{% elif "
        "item['role'] == 'user' %}<|user|>\n{{ item['content'] }}{% elif item['role'] == 'assistant' "
        "%}<|assistant|>\n{{ item['content'] }}{% endif %}{% endfor %}<|assistant|>",
        // mlabonne/AlphaMonarch-7B
        "{% for message in messages %}{{bos_token + message['role'] + '\\n' + message['content'] + eos_token "
        "+ "
        "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ bos_token + 'assistant\\n' }}{% endif %}",
        // OrionStarAI/Orion-14B-Chat
        "{% for message in messages %}{% if loop.first %}{{ bos_token }}{% endif %}{% if message['role'] == "
        "'user' %}{{ 'Human: ' + message['content'] + '\\n\\nAssistant: ' + eos_token }}{% elif "
        "message['role'] == 'assistant' %}{{ message['content'] + eos_token }}{% endif %}{% endfor %}",
        // openchat/openchat-3.5-0106
        "{{ bos_token }}{% for message in messages %}{{ 'GPT4 Correct ' + message['role'].title() + ': ' + "
        "message['content'] + '<|end_of_turn|>'}}{% endfor %}{% if add_generation_prompt %}{{ 'GPT4 Correct "
        "Assistant:' }}{% endif %}",
        // DeepSeek-V2
        "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{{ "
        "bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ 'User: ' + "
        "message['content'] + '\n\n' }}{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + "
        "message['content'] + eos_token }}{% elif message['role'] == 'system' %}{{ message['content'] + "
        "'\n\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}",
        // ChatGLM3
        "{% for message in messages %}{% if loop.first %}[gMASK]sop<|{{ message['role'] }}|>\n {{ "
        "message['content'] }}{% else %}<|{{ message['role'] }}|>\n {{ message['content'] }}{% endif %}{% "
        "endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}",
        "",
        "just some text",
    };
    for (size_t i = 0; i < sizeof(tmpls) / sizeof(tmpls[0]); i++) {
        enum chat_template_id id = chat_template_detect(tmpls[i], strlen(tmpls[i]));
        if (id != CHAT_TEMPLATE_UNKNOWN)
            TEST_FAILF("template %zu detected as %s, want unknown", i, chat_template_name(id));
    }
    CHECK(chat_template_detect(NULL, 0) == CHAT_TEMPLATE_UNKNOWN);
}

/* The llama2 variant markers one at a time, the [INST]-family precedence, and that detection reads exactly
 * len bytes (GGUF strings are not NUL-terminated). */
TEST(detect_markers) {
    static const struct {
        const char *text;
        enum chat_template_id id;
    } cases[] = {
        {"{{ '[INST] ' + content + ' [/INST]' }}", CHAT_TEMPLATE_LLAMA2},
        {"{{ '[INST] <<SYS>>\\n' + sys + '\\n<</SYS>>\\n\\n' }}[INST]", CHAT_TEMPLATE_LLAMA2_SYS},
        {"<<SYS>> {{ bos_token + '[INST] ' + m }}", CHAT_TEMPLATE_LLAMA2_SYS_BOS},
        {"<<SYS>> {{ bos_token + '[INST] ' + content.strip() }}", CHAT_TEMPLATE_LLAMA2_SYS_STRIP},
        {"[INST] [SYSTEM_PROMPT] [AVAILABLE_TOOLS]", CHAT_TEMPLATE_MISTRAL_V7},
        {"<|im_start|> [INST] <start_of_turn>", CHAT_TEMPLATE_CHATML},
        {"<|user|>\n{{ c }}<|endoftext|>", CHAT_TEMPLATE_ZEPHYR},
        {"<|user|> <|assistant|> '</s>' eos_token", CHAT_TEMPLATE_UNKNOWN}, // falcon3 in llama.cpp
        {"<start_of_turn>user", CHAT_TEMPLATE_GEMMA},
        {"<|start_header_id|>", CHAT_TEMPLATE_UNKNOWN},
        {"<|start_header_id|><|end_header_id|> USER: ASSISTANT: ", CHAT_TEMPLATE_UNKNOWN}, // vicuna first
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum chat_template_id id = chat_template_detect(cases[i].text, strlen(cases[i].text));
        if (id != cases[i].id)
            TEST_FAILF("'%s' detected as %s, want %s", cases[i].text, chat_template_name(id),
                       chat_template_name(cases[i].id));
    }
    const char buf[] = {'<', '|', 'i', 'm', '_', 's', 't', 'a', 'r', 't', '|', '>'}; // no NUL
    CHECK(chat_template_detect(buf, sizeof(buf)) == CHAT_TEMPLATE_CHATML);
    CHECK(chat_template_detect(buf, sizeof(buf) - 1) == CHAT_TEMPLATE_UNKNOWN);
    CHECK(chat_template_detect("chatmlx", 6) == CHAT_TEMPLATE_CHATML);
    CHECK(chat_template_detect("chatml", 5) == CHAT_TEMPLATE_UNKNOWN);
}

TEST(for_eos) {
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR_HF, "<|endoftext|>", 13) == CHAT_TEMPLATE_ZEPHYR);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR, "</s>", 4) == CHAT_TEMPLATE_ZEPHYR_HF);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR, "<|endoftext|>", 13) == CHAT_TEMPLATE_ZEPHYR);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR_HF, "</s>", 4) == CHAT_TEMPLATE_ZEPHYR_HF);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR_HF, "</s>x", 4) == CHAT_TEMPLATE_ZEPHYR_HF);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR, "</s>", 3) == CHAT_TEMPLATE_ZEPHYR);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR_HF, "<|im_end|>", 10) == CHAT_TEMPLATE_ZEPHYR_HF);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_ZEPHYR_HF, NULL, 0) == CHAT_TEMPLATE_ZEPHYR_HF);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_CHATML, "</s>", 4) == CHAT_TEMPLATE_CHATML);
    CHECK(chat_template_for_eos(CHAT_TEMPLATE_UNKNOWN, "</s>", 4) == CHAT_TEMPLATE_UNKNOWN);
}

/* Formats the conversation with t, tokenizes it as the server will (add_special, parse_special), and
 * counts the tokens equal to id. */
static int count_token(const struct tokenizer *tok, enum chat_template_id t, int32_t id, int32_t *first) {
    struct ci_err err = {0};
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    int n = 0, count = -1;
    if (chat_apply(t, conversation, N_CONV, true, &text, &len, &err) ||
        tokenizer_encode(tok, text, len, true, true, &ids, &n, &err)) {
        TEST_FAILF("%s: %s", chat_template_name(t), err.msg);
        goto done;
    }
    count = 0;
    for (int i = 0; i < n; i++)
        count += ids[i] == id;
    *first = n > 0 ? ids[0] : -1;
done:
    ci_free(ids);
    ci_free(text);
    return count;
}

/* Phi-3's real tokenizer.chat_template (the "Phi-3-mini" text above) is detected from the GGUF, and every
 * marker the phi3 template writes is one of that vocabulary's special tokens. */
TEST(phi3_gguf) {
    struct gguf *g = test_open_gguf("ggml-vocab/ggml-vocab-phi-3.gguf");
    ASSERT(g != NULL);
    struct tokenizer *tok = NULL;
    struct gguf_str s;
    struct ci_err err = {0};
    if (gguf_get_str(g, "tokenizer.chat_template", &s, &err)) {
        TEST_FAILF("%s", err.msg);
        goto done;
    }
    CHECK(chat_template_detect(s.data, (size_t)s.len) == CHAT_TEMPLATE_PHI3);
    const struct llama_cpp_case *mini = find_case("Phi-3-mini");
    CHECK(mini && s.len == strlen(mini->tmpl) && memcmp(s.data, mini->tmpl, s.len) == 0);
    if (tokenizer_from_gguf(g, &tok, &err)) {
        TEST_FAILF("%s", err.msg);
        goto done;
    }
    // Phi-3's ids: <|assistant|> 32001, <|system|> 32006, <|end|> 32007, <|user|> 32010; BOS 1.
    int32_t first = -1;
    CHECK(count_token(tok, CHAT_TEMPLATE_PHI3, 32007, &first) == N_CONV);
    CHECK(count_token(tok, CHAT_TEMPLATE_PHI3, 32010, &first) == 3);
    CHECK(count_token(tok, CHAT_TEMPLATE_PHI3, 32001, &first) == 3); // 2 answers + the generation prompt
    CHECK(count_token(tok, CHAT_TEMPLATE_PHI3, 32006, &first) == 1);
    CHECK(first == 1); // BOS from the tokenizer, not the template
done:
    tokenizer_free(tok);
    gguf_free(g);
}

/* With the Llama vocabulary (BOS <s> = 1, EOS </s> = 2): the tokenizer adds the one leading BOS, "</s>"
 * after each answer is the EOS token, and only llama2-sys-bos writes "<s>" for later turns. */
TEST(llama_bos_eos) {
    struct gguf *g = test_open_gguf("ggml-vocab/ggml-vocab-llama-spm.gguf");
    ASSERT(g != NULL);
    struct tokenizer *tok = NULL;
    struct ci_err err = {0};
    if (tokenizer_from_gguf(g, &tok, &err)) {
        TEST_FAILF("%s", err.msg);
        goto done;
    }
    int32_t first = -1;
    CHECK(count_token(tok, CHAT_TEMPLATE_LLAMA2, 1, &first) == 1 && first == 1);
    CHECK(count_token(tok, CHAT_TEMPLATE_LLAMA2, 2, &first) == 2);
    CHECK(count_token(tok, CHAT_TEMPLATE_LLAMA2_SYS_STRIP, 1, &first) == 1 && first == 1);
    CHECK(count_token(tok, CHAT_TEMPLATE_LLAMA2_SYS_BOS, 1, &first) == 3 && first == 1);
    CHECK(count_token(tok, CHAT_TEMPLATE_MISTRAL_V3, 2, &first) == 2);
    CHECK(count_token(tok, CHAT_TEMPLATE_ZEPHYR_HF, 2, &first) == N_CONV);
    CHECK(count_token(tok, CHAT_TEMPLATE_ZEPHYR_HF, 1, &first) == 1 && first == 1);
done:
    tokenizer_free(tok);
    gguf_free(g);
}

int main(int argc, char **argv) {
    test_main(argc, argv);
    size_t mem0 = ci_mem_in_use();
    RUN(llama_cpp_cases);
    RUN(by_name_cases);
    RUN(no_generation_prompt);
    RUN(single_user_message);
    RUN(gemma_system_folding);
    RUN(trimming);
    RUN(invalid_input);
    RUN(out_of_memory);
    RUN(names);
    RUN(detect_unsupported);
    RUN(detect_markers);
    RUN(for_eos);
    RUN(phi3_gguf);
    RUN(llama_bos_eos);
    if (ci_mem_in_use() != mem0) {
        printf("FAIL leak: %zu bytes still allocated\n", ci_mem_in_use() - mem0);
        return 1;
    }
    return test_exit_code();
}
