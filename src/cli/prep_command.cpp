// `zerotune prep --input FILE [--input FILE ...] --tokenizer DIR_OR_MODEL --out DIR
//                [--split train] [--max-seq-len 512] [--loss-on response|all]
//                [--shard-samples 10000] [--prompt-column prompt] [--response-column chosen]
//                [--eot-token TEXT] [--skip-bad-rows] [--force] [--pairs [--rejected-column rejected]]`:
// tokenizes JSONL/JSON rows into HDF5 token shards (see data/prep.h; --pairs: preference pairs,
// data/prep_pairs.h) and prints a summary.
#include <unistd.h>

#include <boost/program_options.hpp>

#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/parse_options.h"
#include "core/error.h"
#include "data/prep.h"

namespace zt {

int command_prep(const std::vector<std::string>& args) {
  namespace po = boost::program_options;
  PrepOptions options;
  std::string loss_on = "response";
  po::options_description description(
      "zerotune prep: tokenize prompt/response rows (JSONL or JSON arrays) into HDF5 token shards\noptions");
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
      ("pairs", po::bool_switch(&options.pairs),
       "write preference pairs (prompt, chosen = --response-column, rejected = --rejected-column) for "
       "train --objective reward (DeepSpeed-Chat step 2)")
      ("rejected-column", po::value(&options.rejected_column)->default_value("rejected"),
       "column holding the rejected response (with --pairs)")
      ("skip-bad-rows", po::bool_switch(&options.skip_bad_rows), "count rows missing a column or with an empty response as skipped instead of stopping")
      ("force", po::bool_switch(&options.force), "replace shards of this split already in --out");

  po::variables_map values;
  if (!parse_command_options(args, description, values, "prep")) return 0;
  ZT_CHECK(loss_on == "response" || loss_on == "all", "--loss-on '", loss_on, "': use response or all");
  options.loss_on_all = loss_on == "all";
  ZT_CHECK(options.pairs || values["rejected-column"].defaulted(), "--rejected-column: only with --pairs");
  ZT_CHECK(!values.count("eot-token") || !options.eot_token.empty(),
           "--eot-token: must not be empty (leave it out to end each sample with the EOS id)");
  options.progress = isatty(fileno(stderr)) != 0;  // progress for people, none in logs

  // One process writes the dataset; other ranks of an mpirun launch have nothing to do.
  if (process_rank() != 0) return 0;
  const PrepSummary summary = run_prep(options);
  std::fputs(format_prep_summary(summary, options).c_str(), stdout);
  return 0;
}

}  // namespace zt
