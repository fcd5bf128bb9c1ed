// Chat rows for `zerotune prep --format chat` (data/chat_data.h): each row's `messages` rendered
// with the chat template, tokenized, its assistant turns the targets, cut to --max-seq-len.
#include <memory>

#include "core/error.h"
#include "data/chat_data.h"
#include "data/prep_records.h"

namespace zt {
namespace {

class ChatRecords final : public QueuedSamples {
 public:
  ChatRecords(const Tokenizer& tokenizer, const PrepOptions& options)
      : tokenizer_(tokenizer), options_(options), template_(load_chat_template(options.tokenizer, options.chat_template)),
        special_tokens_(special_token_variables(options.tokenizer, tokenizer)) {}

  std::string bad_row_reason(const nlohmann::json& row) const override {
    const auto messages = row.find("messages");
    if (messages == row.end()) return "missing column 'messages'";
    return bad_conversation_reason(*messages);
  }

  std::string column_options() const override {
    return "--format (chat rows need 'messages': a list of {\"role\", \"content\"} strings with an assistant turn)";
  }

  std::string add_row(const nlohmann::json& row, SplitSummary& summary, std::vector<int64_t>& lengths) override {
    ChatSample chat;
    try {
      chat = build_chat_sample(template_, special_tokens_, tokenizer_, row["messages"]);
    } catch (const Error& error) {  // the template refused this conversation, or failed on it
      if (!options_.skip_bad_rows) fail(error.what(), " (count such rows as skipped with --skip-bad-rows)");
      return error.what();
    }
    TokenSample& sample = chat.sample;
    if (options_.loss_on_all) sample.loss_mask.assign(sample.loss_mask.size(), 1);
    if (!sample.loss_mask.empty()) sample.loss_mask[0] = 0;  // nothing before the first token predicts it
    const bool truncated = static_cast<int64_t>(sample.tokens.size()) > options_.max_seq_len;
    if (truncated) {  // keep the beginning, as the prompt/response samples do
      sample.tokens.resize(static_cast<size_t>(options_.max_seq_len));
      sample.loss_mask.resize(static_cast<size_t>(options_.max_seq_len));
    }
    return queue_sample(std::move(sample), truncated,
                        cat("no assistant token within --max-seq-len ", options_.max_seq_len), summary, lengths, pending_);
  }

 private:
  const Tokenizer& tokenizer_;
  const PrepOptions& options_;
  const ChatTemplate template_;
  const nlohmann::json special_tokens_;
};

}  // namespace

std::unique_ptr<PrepRecords> make_chat_records(const Tokenizer& tokenizer, const PrepOptions& options) {
  return std::make_unique<ChatRecords>(tokenizer, options);
}

}  // namespace zt
