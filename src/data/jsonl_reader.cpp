// JSONL / JSON-array row reader (data/jsonl_reader.h). A JSON array is cut into its top-level
// elements by a small scanner (strings, escapes and nesting depth), and each element is parsed
// on its own, so a row's line number is known and an error inside it can name its line.
#include "data/jsonl_reader.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/error.h"

namespace zt {

JsonRowReader::JsonRowReader(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  ZT_CHECK(in, path, ": cannot open the input file");
  text_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  ZT_CHECK(!in.bad(), path, ": read error");
  skip_blanks();
  if (position_ < text_.size() && text_[position_] == '[') {
    is_array_ = true;
    ++position_;
  } else {  // JSONL: rows are read from the start of each line
    position_ = 0;
    line_ = 1;
  }
}

bool JsonRowReader::next(JsonRow& row) { return is_array_ ? next_array_element(row) : next_jsonl(row); }

void JsonRowReader::skip_blanks() {
  while (position_ < text_.size()) {
    const char c = text_[position_];
    if (c == '\n') {
      ++line_;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      break;
    }
    ++position_;
  }
}

JsonRow JsonRowReader::parse_row(size_t begin, size_t end, int64_t line) const {
  const std::string_view slice(text_.data() + begin, end - begin);
  JsonRow row;
  row.line = line;
  try {
    row.object = nlohmann::json::parse(slice);
  } catch (const nlohmann::json::parse_error& error) {
    // error.byte is 1-based within the slice; name the line the error is on.
    const size_t error_offset = std::min(error.byte > 0 ? error.byte - 1 : 0, slice.size());
    const int64_t error_line = line + std::count(slice.begin(), slice.begin() + static_cast<std::ptrdiff_t>(error_offset), '\n');
    fail(path_, ":", error_line, ": malformed JSON: ", error.what());
  }
  ZT_CHECK(row.object.is_object(), path_, ":", line, ": a row must be a JSON object, got a ", row.object.type_name());
  return row;
}

bool JsonRowReader::next_jsonl(JsonRow& row) {
  while (position_ < text_.size()) {
    const size_t newline = text_.find('\n', position_);
    const size_t end = newline == std::string::npos ? text_.size() : newline;
    const size_t begin = position_;
    const int64_t line = line_;
    position_ = newline == std::string::npos ? text_.size() : newline + 1;
    ++line_;
    const bool blank = std::all_of(text_.begin() + static_cast<std::ptrdiff_t>(begin),
                                   text_.begin() + static_cast<std::ptrdiff_t>(end),
                                   [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
    if (blank) continue;
    row = parse_row(begin, end, line);
    return true;
  }
  return false;
}

bool JsonRowReader::next_array_element(JsonRow& row) {
  if (array_finished_) return false;
  skip_blanks();
  ZT_CHECK(position_ < text_.size(), path_, ":", line_, ": the JSON array is not closed (missing ']')");
  if (text_[position_] == ']') {  // empty array, or the end after the last element
    ++position_;
    array_finished_ = true;
    skip_blanks();
    ZT_CHECK(position_ == text_.size(), path_, ":", line_, ": unexpected text after the JSON array's closing ']'");
    return false;
  }
  // Scan one element: it ends at a ',' or ']' outside strings at nesting depth 0.
  const size_t begin = position_;
  const int64_t line = line_;
  int depth = 0;
  bool in_string = false;
  for (; position_ < text_.size(); ++position_) {
    const char c = text_[position_];
    if (c == '\n') ++line_;
    if (in_string) {
      if (c == '\\') {
        ++position_;  // an escaped character never ends the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    } else if ((c == ',' || c == ']') && depth == 0) {
      break;
    }
  }
  ZT_CHECK(position_ < text_.size(), path_, ":", line, ": the JSON array is not closed (missing ']' after this row)");
  row = parse_row(begin, position_, line);
  if (text_[position_] == ',') {
    ++position_;
    skip_blanks();
    ZT_CHECK(position_ < text_.size(), path_, ":", line_, ": the JSON array is not closed (missing ']')");
    ZT_CHECK(text_[position_] != ']', path_, ":", line_, ": malformed JSON: a ',' must be followed by another row");
  }
  return true;
}

}  // namespace zt
