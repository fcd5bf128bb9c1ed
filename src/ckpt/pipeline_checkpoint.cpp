// A pipeline rank's part in a checkpoint (pipeline_checkpoint.h): its chunks' slices gathered to
// stage 0 in virtual-stage order, and the whole model's layout.
#include "ckpt/pipeline_checkpoint.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace zt {

using json = nlohmann::json;

namespace {

// The store's first unit of each chunk, then the unit after the last chunk's (the copies' unit, if any).
std::vector<int> chunk_store_bounds(const PipelineCheckpoint& pipeline) {
  std::vector<int> bounds = {0};
  for (const std::array<int, 2>& chunk : pipeline.chunks) bounds.push_back(bounds.back() + chunk[1] - chunk[0]);
  return bounds;
}

ParamGroup trainable_group_named(const std::string& name) {
  for (ParamGroup group : kTrainableGroups)
    if (name == param_group_name(group)) return group;
  fail("checkpoint: '", name, "' is not a trainable parameter group");
}

// The elements [begin, end) of a partition array of `group` that hold store units [first, last):
// a rank's slices of consecutive units are consecutive in its partition, at the unit's begin /
// partitions (param_store.h).
std::array<int64_t, 2> partition_range(const ParamStore& store, ParamGroup group, int first, int last, int partitions) {
  const UnitRange from = store.unit_range(group, first), to = store.unit_range(group, last - 1);
  return {from.begin / partitions, (to.begin + to.numel) / partitions};
}

// The partition cut into one piece per chunk: the chunk's range of every array; the per-tensor
// state of the chunks' parameters (not the copies') on the first piece.
std::vector<RankFileContent> chunk_pieces(const RankFileContent& content, const ParamStore& store, int partitions,
                                          const PipelineCheckpoint& pipeline) {
  const std::vector<int> bounds = chunk_store_bounds(pipeline);
  std::vector<RankFileContent> pieces(pipeline.chunks.size());
  for (size_t c = 0; c < pieces.size(); ++c)
    for (const RankFileContent::Array& array : content.arrays) {
      const auto [begin, end] = partition_range(store, trainable_group_named(array.group), bounds[c], bounds[c + 1],
                                                partitions);
      ZT_CHECK(end <= static_cast<int64_t>(array.values.size()), "checkpoint: chunk ", c, " of array ", array.group,
               "/", array.name, " ends at ", end, ", the partition has ", array.values.size());
      pieces[c].arrays.push_back({array.group, array.name, {array.values.begin() + begin, array.values.begin() + end}});
    }
  for (const RankFileContent::Array& state : content.tensor_state)
    if (store.unit_of(state.group) < bounds.back()) pieces.front().tensor_state.push_back(state);
  return pieces;
}

// What the pieces hold, for the receiver: per piece, [group, name, n] of each array, then of each
// per-tensor state.
json piece_sizes(const std::vector<RankFileContent>& pieces) {
  json sizes = json::array();
  for (const RankFileContent& piece : pieces) {
    json entry = {{"arrays", json::array()}, {"tensor_state", json::array()}};
    for (const RankFileContent::Array& array : piece.arrays)
      entry["arrays"].push_back({array.group, array.name, array.values.size()});
    for (const RankFileContent::Array& state : piece.tensor_state)
      entry["tensor_state"].push_back({state.group, state.name, state.values.size()});
    sizes.push_back(entry);
  }
  return sizes;
}

Tensor host_view(std::vector<float>& values) { return f32_view(values.data(), {static_cast<int64_t>(values.size())}); }

// Arrays, then per-tensor state, in the order piece_sizes lists them (MPI matches in issue order).
void send_piece(Communicator& world, RankFileContent& piece, int to) {
  for (auto* list : {&piece.arrays, &piece.tensor_state})
    for (RankFileContent::Array& array : *list)
      if (!array.values.empty()) world.send_async(host_view(array.values), to)->wait();
}

RankFileContent receive_piece(Communicator& world, const json& sizes, int from) {
  RankFileContent piece;
  for (const char* kind : {"arrays", "tensor_state"})
    for (const json& entry : sizes.at(kind)) {
      std::vector<RankFileContent::Array>& list = std::string(kind) == "arrays" ? piece.arrays : piece.tensor_state;
      list.push_back({entry.at(0).get<std::string>(), entry.at(1).get<std::string>(),
                      std::vector<float>(entry.at(2).get<size_t>())});
      if (!list.back().values.empty()) world.recv_async(host_view(list.back().values), from)->wait();
    }
  return piece;
}

// The piece's arrays appended to the content's of the same group and name; its per-tensor state added.
void append_piece(RankFileContent& content, RankFileContent&& piece) {
  for (RankFileContent::Array& array : piece.arrays) {
    auto found = std::find_if(content.arrays.begin(), content.arrays.end(),
                              [&](const RankFileContent::Array& a) { return a.group == array.group && a.name == array.name; });
    if (found == content.arrays.end()) {
      content.arrays.push_back(std::move(array));
      continue;
    }
    found->values.insert(found->values.end(), array.values.begin(), array.values.end());
  }
  for (RankFileContent::Array& state : piece.tensor_state) content.tensor_state.push_back(std::move(state));
}

}  // namespace

json store_layout_json(const ParamStore& store, int first, int count) {
  if (count < 0) count = store.num_units() - first;
  json groups = json::object();
  std::map<ParamGroup, int64_t> base;  // the group's offset of unit `first`
  for (ParamGroup group : kTrainableGroups) {
    base[group] = count > 0 ? store.unit_range(group, first).begin : 0;
    json units = json::array();
    int64_t numel = 0;
    for (int unit = first; unit < first + count; ++unit) {
      const UnitRange range = store.unit_range(group, unit);
      units.push_back({range.begin - base[group], range.numel});
      numel = range.begin + range.numel - base[group];
    }
    groups[param_group_name(group)] = {{"numel", numel}, {"units", units}};
  }
  json parameters = json::array();
  for (const ParamEntry& entry : store.entries()) {
    if (entry.group == ParamGroup::Frozen || entry.unit < first || entry.unit >= first + count) continue;
    parameters.push_back({{"name", entry.spec.name}, {"shape", entry.spec.shape}, {"group", param_group_name(entry.group)},
                          {"offset", entry.offset - base[entry.group]}, {"unit", entry.unit - first}});
  }
  return {{"groups", groups}, {"parameters", parameters}};
}

void gather_pipeline_partition(RankFileContent& content, const ParamStore& store, int partitions,
                               const PipelineCheckpoint& pipeline, bool holder) {
  Communicator& world = *pipeline.world;
  std::vector<RankFileContent> pieces;
  if (holder) pieces = chunk_pieces(content, store, partitions, pipeline);
  const std::vector<std::string> sizes = world.all_gather_strings(holder ? piece_sizes(pieces).dump() : "null");
  if (!holder) return;
  if (pipeline.stage > 0) {  // to the replica's stage-0 rank, in the order of its virtual stages
    for (RankFileContent& piece : pieces) send_piece(world, piece, pipeline.rank_of(0));
    return;
  }
  content = RankFileContent();
  const int chunks = static_cast<int>(pipeline.chunks.size());
  for (int virtual_stage = 0; virtual_stage < chunks * pipeline.stages; ++virtual_stage) {
    const int stage = virtual_stage % pipeline.stages, chunk = virtual_stage / pipeline.stages;
    if (stage == 0) {
      append_piece(content, std::move(pieces.at(static_cast<size_t>(chunk))));
      continue;
    }
    const int from = pipeline.rank_of(stage);
    const json theirs = json::parse(sizes.at(static_cast<size_t>(from))).at(static_cast<size_t>(chunk));
    append_piece(content, receive_piece(world, theirs, from));
  }
}

json gather_pipeline_layout(const ParamStore& store, const PipelineCheckpoint& pipeline, bool speaks) {
  json mine = json::array();
  const std::vector<int> bounds = chunk_store_bounds(pipeline);
  for (size_t c = 0; speaks && c < pipeline.chunks.size(); ++c)
    mine.push_back({{"virtual_stage", pipeline.virtual_stage(static_cast<int>(c))},
                    {"first_unit", pipeline.chunks[c][0]},
                    {"layout", store_layout_json(store, bounds[c], bounds[c + 1] - bounds[c])}});
  std::vector<json> chunks;
  for (const std::string& text : pipeline.world->all_gather_strings(mine.dump()))
    for (const json& chunk : json::parse(text)) chunks.push_back(chunk);
  std::sort(chunks.begin(), chunks.end(),
            [](const json& a, const json& b) { return a.at("virtual_stage").get<int>() < b.at("virtual_stage").get<int>(); });
  // Units and parameters of the chunks one after the other in each group.
  json merged = {{"groups", json::object()}, {"parameters", json::array()}};
  for (const json& chunk : chunks) {
    const int first_unit = chunk.at("first_unit");
    std::map<std::string, int64_t> base;  // the group's elements before this chunk
    for (const auto& [group, layout] : chunk.at("layout").at("groups").items()) {
      json& into = merged["groups"][group];
      if (into.is_null()) into = {{"numel", 0}, {"units", json::array()}};
      base[group] = into.at("numel").get<int64_t>();
      for (const json& unit : layout.at("units")) into["units"].push_back({unit.at(0).get<int64_t>() + base[group], unit.at(1)});
      into["numel"] = base[group] + layout.at("numel").get<int64_t>();
    }
    for (json parameter : chunk.at("layout").at("parameters")) {
      parameter["offset"] = parameter.at("offset").get<int64_t>() + base.at(parameter.at("group"));
      parameter["unit"] = parameter.at("unit").get<int>() + first_unit;
      merged["parameters"].push_back(parameter);
    }
  }
  return merged;
}

}  // namespace zt
