// Which ranks share a GPU (see gpu_sharing.h).
#include "comm/gpu_sharing.h"

#include <map>
#include <set>

#include "core/error.h"

namespace zt {

GpuSharing gpu_sharing(const std::vector<std::string>& placements) {
  std::map<std::string, std::vector<size_t>> ranks_of;  // placement -> ranks
  std::set<std::string> hosts;
  for (size_t rank = 0; rank < placements.size(); ++rank) {
    ranks_of[placements[rank]].push_back(rank);
    hosts.insert(placements[rank].substr(0, placements[rank].find('|')));
  }
  GpuSharing sharing;
  for (const auto& [placement, ranks] : ranks_of) {
    if (ranks.size() < 2) continue;
    std::string list;
    for (size_t i = 0; i < ranks.size(); ++i) list += (i ? (i + 1 == ranks.size() ? " and " : ", ") : "") + std::to_string(ranks[i]);
    const size_t bar = placement.find('|');
    sharing.shared = true;
    sharing.reason = cat("ranks ", list, " share GPU ", placement.substr(bar + 1), " on ", placement.substr(0, bar));
    return sharing;
  }
  sharing.reason = cat("every rank has its own GPU (", placements.size(), " GPU", placements.size() == 1 ? "" : "s",
                       " on ", hosts.size(), " host", hosts.size() == 1 ? "" : "s", ", told apart by PCI bus id)");
  return sharing;
}

}  // namespace zt
