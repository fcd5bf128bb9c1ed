// Reading rows of JSON objects from a JSONL file (one object per line, blank lines ignored) or
// a JSON array of objects, one row at a time, each with the line it starts on so every error
// can say FILE:LINE.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace zt {

struct JsonRow {
  nlohmann::json object;  // always a JSON object
  int64_t line = 0;       // 1-based line where the row starts in its file
};

class JsonRowReader {
 public:
  // Reads the whole file (a JSON array when its first non-blank character is '[', else JSONL).
  explicit JsonRowReader(const std::string& path);

  // The next row, or false at the end. Malformed JSON, a row that is not an object or a broken
  // array is a zt::Error "FILE:LINE: ...".
  bool next(JsonRow& row);

  const std::string& path() const { return path_; }
  int64_t bytes_done() const { return static_cast<int64_t>(position_); }  // for progress
  int64_t bytes_total() const { return static_cast<int64_t>(text_.size()); }

 private:
  bool next_jsonl(JsonRow& row);
  bool next_array_element(JsonRow& row);
  void skip_blanks();  // spaces, tabs, CR, LF (counting lines)
  JsonRow parse_row(size_t begin, size_t end, int64_t line) const;

  std::string path_;
  std::string text_;
  bool is_array_ = false;
  bool array_finished_ = false;
  size_t position_ = 0;  // next unread byte of text_
  int64_t line_ = 1;     // line of text_[position_]
};

}  // namespace zt
