// `zerotune prep --input FILE [--input FILE ...] --tokenizer DIR_OR_MODEL --out DIR
//                [--split train] [--max-seq-len 512] [--loss-on response|all]
//                [--shard-samples 10000] [--prompt-column prompt] [--response-column chosen]
//                [--eot-token TEXT] [--skip-bad-rows] [--force] [--pairs [--rejected-column rejected]]
//                [--format prompt-response|chat [--chat-template FILE]]
//                [--eval-input FILE ... | --eval-fraction F] [--eval-split eval]
//                [--data-split W,W,W [--data-phase 1]] [--seed 1234]`:
// tokenizes JSONL/JSON rows into HDF5 token shards (see data/prep.h; --pairs: preference pairs,
// data/prep_pairs.h; --format chat: chat messages, data/chat_data.h), the training split and
// optionally an evaluation split, and prints a summary.
#include <unistd.h>

#include <boost/program_options.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/error.h"
#include "data/prep.h"

namespace zt {

namespace {

// "2,4,4" -> {2, 4, 4}.
std::vector<double> parse_split_weights(const std::string& text) {
  std::vector<double> weights;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    char* parsed_end = nullptr;
    const double weight = std::strtod(item.c_str(), &parsed_end);
    ZT_CHECK(!item.empty() && parsed_end == item.c_str() + item.size(), "--data-split '", text,
             "': weights separated by commas, e.g. 2,4,4 (DeepSpeed-Chat's --data_split)");
    weights.push_back(weight);
    begin = end + 1;
  }
  return weights;
}

}  // namespace

int command_prep(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  PrepOptions options;
  std::string loss_on = "response";
  std::string format = "prompt-response";
  int64_t seed = 1234;
  po::options_description description(
      "zerotune prep: tokenize prompt/response rows or chat messages (JSONL or JSON arrays) into HDF5 token shards\noptions");
  description.add_options()
      ("help,h", "print this help")
      ("input", po::value(&options.inputs)->required()->composing(), "input file, JSONL or a JSON array (repeat for several)")
      ("tokenizer", po::value(&options.tokenizer)->required(),
       "model directory (tokenizer.model, tokenizer.json or vocab.json + merges.txt), or a tokenizer file")
      ("out", po::value(&options.out_dir)->required(), "output directory for <split>-00000.h5 ...")
      ("split", po::value(&options.split)->default_value("train"), "split name (shard file prefix)")
      ("max-seq-len", po::value(&options.max_seq_len)->default_value(512), "cut samples to this many tokens")
      ("loss-on", po::value(&loss_on)->default_value("response"), "response: loss on response + EOS; all: on everything after BOS")
      ("eot-token", po::value(&options.eot_token),
       "text appended to each response instead of the EOS id, tokenized with it (DeepSpeed-Chat before Sep 2024: "
       "'<|endoftext|>'); default: the EOS id, as DeepSpeed-Chat's step 1 now appends tokenizer.eos_token")
      ("shard-samples", po::value(&options.shard_samples)->default_value(10000), "samples per shard file")
      ("prompt-column", po::value(&options.prompt_column)->default_value("prompt"), "column holding the prompt")
      ("response-column", po::value(&options.response_column)->default_value("chosen"), "column holding the response")
      ("format", po::value(&format)->default_value("prompt-response"),
       "prompt-response: a prompt and a response column per row; chat: a 'messages' list of {role, content} per row, "
       "rendered with the model's chat template as transformers' apply_chat_template does, loss on the assistant turns "
       "(their end-of-turn token included)")
      ("chat-template", po::value(&options.chat_template),
       "with --format chat: the chat template to use instead of the model's (a Jinja file, or a JSON file with a "
       "\"chat_template\" such as a tokenizer_config.json)")
      ("pairs", po::bool_switch(&options.pairs),
       "write preference pairs (prompt, chosen = --response-column, rejected = --rejected-column) for "
       "train --objective reward (DeepSpeed-Chat step 2)")
      ("rejected-column", po::value(&options.rejected_column)->default_value("rejected"),
       "column holding the rejected response (with --pairs)")
      ("skip-bad-rows", po::bool_switch(&options.skip_bad_rows), "count rows missing a column or with an empty response as skipped instead of stopping")
      ("eval-input", po::value(&options.eval_inputs)->composing(),
       "the dataset's own evaluation rows (rm-static's test split; repeat for several): written as the --eval-split "
       "shards next to the training split, as DeepSpeed-Chat evaluates step 1 on them")
      ("eval-fraction", po::value(&options.eval_fraction)->default_value(0.0),
       "hold out this share of the --input rows as the --eval-split shards (a dataset without its own evaluation rows; "
       "0.1 = DeepSpeed-Chat's \"9,1\" train_eval split, the same rows for the same --seed)")
      ("eval-split", po::value(&options.eval_split)->default_value("eval"), "split name of the evaluation shards")
      ("seed", po::value(&seed)->default_value(1234),
       "seed of the --eval-fraction and --data-split permutations (numpy.random.RandomState(seed).shuffle; "
       "DeepSpeed-Chat's --seed, default 1234)")
      ("data-split", po::value<std::string>(),
       "W,W,...: DeepSpeed-Chat's --data_split (its default 2,4,4): keep only --data-phase's portion of a seeded "
       "permutation of each split's rows (default: every row)")
      ("data-phase", po::value(&options.data_phase)->default_value(1), "the portion of --data-split to keep (1: step 1)")
      ("force", po::bool_switch(&options.force), "replace shards of this split (and of --eval-split) already in --out");

  po::variables_map values;
  if (!parse_command_options(args, description, values, "prep")) return 0;
  ZT_CHECK(loss_on == "response" || loss_on == "all", "--loss-on '", loss_on, "': use response or all");
  options.loss_on_all = loss_on == "all";
  ZT_CHECK(format == "prompt-response" || format == "chat", "--format '", format, "': use prompt-response or chat");
  options.chat = format == "chat";
  ZT_CHECK(!options.chat || (values["prompt-column"].defaulted() && values["response-column"].defaulted()),
           "--prompt-column/--response-column: chat data (--format chat) reads each row's 'messages'");
  ZT_CHECK(options.pairs || values["rejected-column"].defaulted(), "--rejected-column: only with --pairs");
  ZT_CHECK(!values.count("eot-token") || !options.eot_token.empty(),
           "--eot-token: must not be empty (leave it out to end each sample with the EOS id)");
  // numpy's RandomState takes 0 .. 2^32 - 1 (a negative seed must not wrap around).
  ZT_CHECK(seed >= 0 && seed <= 0xffffffffLL, "--seed ", seed, ": must be in 0 .. 4294967295 (numpy's RandomState seeds)");
  options.seed = static_cast<uint32_t>(seed);
  if (values.count("data-split")) options.data_split = parse_split_weights(values["data-split"].as<std::string>());
  options.progress = isatty(fileno(stderr)) != 0;  // progress for people, none in logs

  // One process writes the dataset; other ranks of an mpirun launch have nothing to do.
  if (process_rank() != 0) return 0;
  const PrepSummary summary = run_prep(options);
  std::fputs(format_prep_summary(summary, options).c_str(), stdout);
  return 0;
}

}  // namespace zt
