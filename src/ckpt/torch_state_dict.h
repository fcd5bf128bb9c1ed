// A state dict as PyTorch's torch.save writes it (its zip container, torch >= 1.6), for the
// readers that take nothing else: DeepSpeed-Chat's step 3 loads a step-2 reward model with
// torch.load(".../pytorch_model.bin"). The file is an OrderedDict name -> tensor that
// torch.load(path, weights_only=True) accepts:
//   ARCHIVE/data.pkl    pickle protocol 2: collections.OrderedDict of
//                       torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())
//                       with each storage a persistent id ('storage', torch.<T>Storage, key,
//                       'cpu', numel), T Float, Half or BFloat16
//   ARCHIVE/byteorder   "little"
//   ARCHIVE/data/KEY    the storage's bytes (KEY = 0, 1, ...: the tensors in entry order)
//   ARCHIVE/version     "3\n" (the format's record version)
// ARCHIVE is the file name without its extension, as torch.save names it. Entries are contiguous
// row-major tensors (stride from the shape), converted to their stored dtype.
#pragma once
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace zt {

// Writes ENTRIES to PATH (atomically: PATH.tmp renamed over PATH).
void write_torch_state_dict(const std::string& path, const std::vector<SafetensorsEntry>& entries);

}  // namespace zt
