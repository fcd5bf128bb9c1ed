// Chat-format data for `zerotune prep --format chat`: rows holding `messages` (a list of
// {"role", "content"} objects, an optional system turn first), rendered with the model's chat
// template (data/chat_template.h) and tokenized exactly as transformers'
// tokenizer.apply_chat_template(messages, tokenize=True) does: the template gets messages,
// add_generation_prompt=false and the tokenizer's special tokens as strings (bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token,
// additional_special_tokens: HF's special_tokens_map), and the rendered text is tokenized with
// its special-token strings as their ids and no BOS/EOS added (Tokenizer::encode_with_special_tokens).
//
// The loss mask: 1 on every assistant turn's tokens, its end-of-turn token included, 0 on
// everything else (system and user turns, the template's headers). An assistant turn k
// (messages[k].role == "assistant") spans, in the rendered text,
//   from  render(messages[:k], add_generation_prompt=true)    (everything before its content,
//                                                               the assistant header included)
//   to    render(messages[:k+1], add_generation_prompt=false)  (through its end of turn)
// Both must be prefixes of the whole rendering (an error otherwise). Its targets are the tokens
// of the whole text from the first one that tokenizing the text before the turn does not give
// up to the last one that tokenizing the text through the turn gives (longest common prefixes
// of the token ids): a token that straddles the turn's start is a target, one that straddles its
// end is not. What the turn adds is what is learnt: LLaMA-2 ' answer </s>', Mistral
// 'answer</s>' (v0.1: 'answer</s> '), Llama-3 'answer<|eot_id|>', ChatML 'answer<|im_end|>\n'.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "data/chat_template.h"
#include "data/token_shards.h"
#include "data/tokenizer.h"

namespace zt {

// The chat template for the tokenizer at `tokenizer_path` (a model directory or a tokenizer file
// in one): `override_file` when given (a Jinja template file, or a JSON file with a
// "chat_template" key such as another model's tokenizer_config.json), else the "chat_template"
// of tokenizer_config.json in the model directory. A template given as a list of
// {"name", "template"} uses the one named "default". None found is a zt::Error saying how to
// give one (zerotune does not fall back to a default template, as transformers 4.40 did).
ChatTemplate load_chat_template(const std::string& tokenizer_path, const std::string& override_file);

// The special-token variables of the template (see above) for the tokenizer at `tokenizer_path`:
// the HF json files' named tokens; a SentencePiece model's own <s>, </s>, <unk> pieces where the
// files name none (HF's LlamaTokenizer defaults).
nlohmann::json special_token_variables(const std::string& tokenizer_path, const Tokenizer& tokenizer);

// Why `messages` (a row's value) is no conversation zerotune can render ("" when it is one): not
// a list, empty, an element that is no object with "role" and "content" strings, no assistant turn.
std::string bad_conversation_reason(const nlohmann::json& messages);

// One conversation rendered and tokenized, with the loss mask above (not cut to any length).
struct ChatSample {
  std::string text;  // the rendered conversation
  TokenSample sample;
};
ChatSample build_chat_sample(const ChatTemplate& chat_template, const nlohmann::json& special_tokens,
                             const Tokenizer& tokenizer, const nlohmann::json& messages);

}  // namespace zt
