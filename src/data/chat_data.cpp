// Chat-format data (data/chat_data.h): finding the template, the special-token variables, and
// rendering + tokenizing + masking one conversation.
#include "data/chat_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "data/hf_tokenizer_config.h"

namespace zt {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

fs::path model_directory(const std::string& tokenizer_path) {
  const fs::path path(tokenizer_path);
  return fs::is_directory(path) ? path : path.parent_path();
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path.string(), ": cannot open for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ZT_CHECK(!in.bad(), path.string(), ": read error");
  return text;
}

// The "chat_template" value of a JSON document: a string, or a list of {"name", "template"}
// (the "default" one). Empty when the key is absent or null.
std::string template_from_json(const Json& document, const std::string& where) {
  const auto found = document.find("chat_template");
  if (found == document.end() || found->is_null()) return "";
  if (found->is_string()) return found->get<std::string>();
  ZT_CHECK(found->is_array(), where, ": chat_template must be a string or a list of {\"name\", \"template\"}, not ",
           found->type_name());
  std::string names;
  for (const Json& entry : *found) {
    ZT_CHECK(entry.is_object() && entry.contains("name") && entry["name"].is_string() && entry.contains("template") &&
                 entry["template"].is_string(),
             where, ": each chat_template entry must be {\"name\": ..., \"template\": ...}, not ", entry.dump());
    if (entry["name"] == "default") return entry["template"].get<std::string>();
    names += cat(names.empty() ? "" : ", ", entry["name"].get<std::string>());
  }
  fail(where, ": chat_template lists templates (", names, ") but none named \"default\"; give one with --chat-template FILE");
}

Json read_json_file(const fs::path& path) {
  try {
    return Json::parse(read_text_file(path));
  } catch (const Json::exception& error) {
    fail(path.string(), ": not valid JSON: ", error.what());
  }
}

// Length of the longest common prefix of `a` and `b`.
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(a.size(), b.size())), b.begin()).first -
                             a.begin());
}

std::string render(const ChatTemplate& chat_template, const Json& special_tokens, const Json& messages,
                   bool add_generation_prompt) {
  Json variables = special_tokens;
  variables["messages"] = messages;
  variables["add_generation_prompt"] = add_generation_prompt;
  return chat_template.render(variables);
}

Json first_messages(const Json& messages, size_t count) {
  return Json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(count));
}

}  // namespace

ChatTemplate load_chat_template(const std::string& tokenizer_path, const std::string& override_file) {
  if (!override_file.empty()) {
    const fs::path path(override_file);
    ZT_CHECK(fs::is_regular_file(path), "--chat-template ", override_file, ": no such file");
    if (path.extension() != ".json") return ChatTemplate(read_text_file(path), override_file);
    const std::string source = template_from_json(read_json_file(path), override_file);
    ZT_CHECK(!source.empty(), "--chat-template ", override_file, ": this JSON file has no \"chat_template\"");
    return ChatTemplate(source, cat(override_file, " (chat_template)"));
  }
  const fs::path config = model_directory(tokenizer_path) / "tokenizer_config.json";
  const std::string source = fs::exists(config) ? template_from_json(read_json_file(config), config.string()) : "";
  ZT_CHECK(!source.empty(), config.string(), fs::exists(config) ? ": has no chat_template" : ": no such file (no chat_template)",
           "; chat data (--format chat) is rendered with the model's chat template: give one with --chat-template FILE "
           "(a Jinja template, or a tokenizer_config.json that has one)");
  return ChatTemplate(source, cat(config.string(), " (chat_template)"));
}

Json special_token_variables(const std::string& tokenizer_path, const Tokenizer& tokenizer) {
  const fs::path dir = model_directory(tokenizer_path);
  const HfTokenizerConfig config = read_hf_tokenizer_config(dir);
  Json variables = Json::object();
  for (const auto& [key, token] : config.named)  // HF's special_tokens_map leaves out empty values
    if (!token.content.empty()) variables[key] = token.content;
  if (!config.additional_special.empty()) {
    Json list = Json::array();
    for (const AddedToken& token : config.additional_special) list.push_back(token.content);
    variables["additional_special_tokens"] = list;
  }
  const std::optional<TokenizerFiles> files = find_tokenizer_files(tokenizer_path);
  if (files && files->kind == TokenizerKind::kSentencePiece) {  // LlamaTokenizer's defaults: the model's pieces
    const auto piece = [&](int64_t id) { return tokenizer.pieces_text({static_cast<int32_t>(id)}); };
    if (!variables.contains("bos_token") && tokenizer.bos_id() >= 0) variables["bos_token"] = piece(tokenizer.bos_id());
    if (!variables.contains("eos_token") && tokenizer.eos_id() >= 0) variables["eos_token"] = piece(tokenizer.eos_id());
  }
  return variables;
}

std::string bad_conversation_reason(const Json& messages) {
  if (!messages.is_array()) return cat("'messages' is not a list (", messages.type_name(), ")");
  if (messages.empty()) return "empty conversation ('messages' is [])";
  bool has_assistant = false;
  for (const Json& message : messages) {
    if (!message.is_object()) return "a message is not an object";
    for (const char* key : {"role", "content"}) {
      const auto found = message.find(key);
      if (found == message.end()) return cat("a message has no '", key, "'");
      if (!found->is_string()) return cat("a message's '", key, "' is not a string");
    }
    has_assistant = has_assistant || message["role"] == "assistant";
  }
  if (!has_assistant) return "no assistant turn (nothing to learn)";
  return "";
}

ChatSample build_chat_sample(const ChatTemplate& chat_template, const Json& special_tokens, const Tokenizer& tokenizer,
                             const Json& messages) {
  ChatSample chat;
  chat.text = render(chat_template, special_tokens, messages, false);
  chat.sample.tokens = tokenizer.encode_with_special_tokens(chat.text);  // [L]
  chat.sample.loss_mask.assign(chat.sample.tokens.size(), 0);           // [L]
  for (size_t turn = 0; turn < messages.size(); ++turn) {
    if (messages[turn]["role"] != "assistant") continue;
    const std::string before = render(chat_template, special_tokens, first_messages(messages, turn), true);
    const std::string through = render(chat_template, special_tokens, first_messages(messages, turn + 1), false);
    ZT_CHECK(chat.text.compare(0, before.size(), before) == 0 && chat.text.compare(0, through.size(), through) == 0 &&
                 before.size() <= through.size(),
             "the chat template does not render the conversation up to message ", turn + 1,
             " (an assistant turn) as the start of the whole conversation, so zerotune cannot tell that turn's tokens "
             "(docs/data.md, chat data: the masking rule)");
    const size_t first = before.empty() ? 0 : common_prefix(tokenizer.encode_with_special_tokens(before), chat.sample.tokens);
    const size_t end = common_prefix(tokenizer.encode_with_special_tokens(through), chat.sample.tokens);
    for (size_t i = first; i < end; ++i) chat.sample.loss_mask[i] = 1;
  }
  return chat;
}

}  // namespace zt
