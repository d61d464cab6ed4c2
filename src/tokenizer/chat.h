/* Chat templates: turn an OpenAI-style list of {role, content} messages into the one prompt string a chat
 * model was trained on, the way llama.cpp's built-in (non-Jinja) templates do (llm_chat_apply_template and
 * llm_chat_detect_template in llama.cpp's src/llama-chat.cpp).  There is no Jinja engine: a GGUF's
 * tokenizer.chat_template is only scanned for marker substrings to pick one of the built-in formats.
 *
 * Template names are llama.cpp's (so `--chat-template NAME` means what it means to llama-server):
 *   chatml            <|im_start|>role\n...<|im_end|>\n                    (Qwen, SmolLM, OpenHermes, ...)
 *   llama2            [INST] sys\nuser [/INST]assistant</s>[INST] ...     (system text folded, no <<SYS>>)
 *   llama2-sys        as llama2 with a <<SYS>>\n...\n<</SYS>>\n\n block
 *   llama2-sys-bos    as llama2-sys, and every turn after the first starts with "<s>[INST] "
 *   llama2-sys-strip  as llama2-sys with each message's content trimmed    (Meta's Llama-2-chat template)
 *   mistral-v1        " [INST] sys\n\nuser [/INST] assistant</s>"
 *   mistral-v3        "[INST] sys\n\nuser[/INST] assistant</s>"           (assistant content trimmed)
 *   mistral-v3-tekken "[INST]sys\n\nuser[/INST]assistant</s>"
 *   mistral-v7        "[SYSTEM_PROMPT] sys[/SYSTEM_PROMPT][INST] user[/INST] assistant</s>"
 *   mistral-v7-tekken the same without the spaces
 *   phi3              <|role|>\n...<|end|>\n
 *   zephyr            <|role|>\n...<|endoftext|>\n  (llama.cpp's: stablelm-2-zephyr, whose EOS is
 *                     <|endoftext|>)
 *   zephyr-hf         <|role|>\n...</s>\n           (cinfer's addition: HuggingFaceH4/zephyr-7b-beta and
 *                     TinyLlama-1.1B-Chat, whose EOS is </s>)
 *   gemma             <start_of_turn>user\n...<end_of_turn>\n; assistant is "model"; system text (trimmed)
 *                     is folded into the next user turn; contents trimmed
 *   llama3            <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> (contents trimmed)
 *
 * BOS: like llama.cpp, no template writes the leading BOS ("<s>", "<|begin_of_text|>"); the caller tokenizes
 * the whole prompt with tokenizer_encode(add_special = true, parse_special = true), which adds BOS as the
 * vocabulary asks and turns the marker texts above ("<|im_start|>", "</s>", "[INST]", ...) into their
 * special tokens.  Only llama2-sys-bos writes "<s>" itself, for turns after the first.  As in llama-server,
 * marker texts typed inside message content are parsed as special tokens too.
 *
 * Ownership: chat_apply returns a ci_malloc'ed, NUL-terminated string the caller frees with ci_free.
 * Everything here is pure and thread-safe. */
#ifndef CINFER_TOKENIZER_CHAT_H
#define CINFER_TOKENIZER_CHAT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/status.h"

enum chat_template_id {
    CHAT_TEMPLATE_UNKNOWN = 0,
    CHAT_TEMPLATE_CHATML,
    CHAT_TEMPLATE_LLAMA2,
    CHAT_TEMPLATE_LLAMA2_SYS,
    CHAT_TEMPLATE_LLAMA2_SYS_BOS,
    CHAT_TEMPLATE_LLAMA2_SYS_STRIP,
    CHAT_TEMPLATE_MISTRAL_V1,
    CHAT_TEMPLATE_MISTRAL_V3,
    CHAT_TEMPLATE_MISTRAL_V3_TEKKEN,
    CHAT_TEMPLATE_MISTRAL_V7,
    CHAT_TEMPLATE_MISTRAL_V7_TEKKEN,
    CHAT_TEMPLATE_PHI3,
    CHAT_TEMPLATE_ZEPHYR,
    CHAT_TEMPLATE_ZEPHYR_HF,
    CHAT_TEMPLATE_GEMMA,
    CHAT_TEMPLATE_LLAMA3,
    CHAT_TEMPLATE_COUNT, // ids 1 .. COUNT-1 are the built-in templates
};

/* What the server uses when the model has no recognisable template and the user gave no --chat-template. */
#define CHAT_TEMPLATE_DEFAULT CHAT_TEMPLATE_CHATML

struct chat_message {
    const char *role;    // "system", "user" or "assistant"
    const char *content; // UTF-8, NUL-terminated
};

/* A built-in name from the table above (exact, case-sensitive), or "mistral" and any other name starting
 * with "mistral" that is not a built-in one, which llama.cpp maps to llama2.  NULL or anything else:
 * CHAT_TEMPLATE_UNKNOWN. */
enum chat_template_id chat_template_from_name(const char *name);
/* The name of id ("unknown" for CHAT_TEMPLATE_UNKNOWN and out-of-range values).  Static storage. */
const char *chat_template_name(enum chat_template_id id);

/* Picks a built-in template for a Jinja chat template (GGUF tokenizer.chat_template; len bytes, need not be
 * NUL-terminated) by llama.cpp's substring heuristics, checked in llama.cpp's order, e.g. "<|im_start|>" →
 * chatml, "[INST]" → mistral-v7 / v1 / v3 / v3-tekken / the llama2 variants by further markers,
 * "<|assistant|>"
 * + "<|end|>" → phi3, "<start_of_turn>" → gemma, "<|start_header_id|>" + "<|end_header_id|>" → llama3.  A
 * text that is exactly a built-in name gives that template.  CHAT_TEMPLATE_UNKNOWN when nothing matches, and
 * also when llama.cpp would pick a template cinfer does not implement (phi4, falcon3, glmedge, command-r,
 * ...), so a near miss never silently gets the wrong format.  One addition to llama.cpp's rules: a
 * Zephyr-layout template ("<|user|>" and "<|assistant|>", ending turns with eos_token, no literal "</s>"),
 * which llama.cpp would map to glmedge, gives zephyr-hf; see chat_template_for_eos. */
enum chat_template_id chat_template_detect(const char *jinja, size_t len);

/* The Zephyr layout ends turns with the model's EOS text, which a Jinja template names only as eos_token.
 * For id zephyr or zephyr-hf, returns the one of the two whose end-of-turn text equals eos_text[0..len)
 * ("<|endoftext|>" → zephyr, "</s>" → zephyr-hf); every other id, and an EOS text that is neither, is
 * returned unchanged. */
enum chat_template_id chat_template_for_eos(enum chat_template_id id, const char *eos_text, size_t len);

/* Formats msgs[0..n) with template t into *out (ci_malloc'ed, NUL-terminated; *len excludes the NUL).
 * add_generation_prompt appends the header that makes the model answer as the assistant (for the
 * templates that have one; the [INST] families end a user turn with [/INST] already).  Output matches
 * llama.cpp's llm_chat_apply_template byte for byte, including its quirks (which templates trim content).
 *   CI_ERR_INVALID  t is not a built-in template, msgs is NULL or n < 1, a role or content is NULL, or a
 *                   role is not system/user/assistant (the message says which message and why);
 *   CI_ERR_LIMIT    the prompt's size overflows size_t;
 *   CI_ERR_NOMEM.
 * On error *out and *len are left unchanged. */
enum ci_status chat_apply(enum chat_template_id t, const struct chat_message *msgs, int n,
                          bool add_generation_prompt, char **out, size_t *len, struct ci_err *err);

#endif
