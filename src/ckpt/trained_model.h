// A model with its trained weights, ready for inference (`zerotune generate`): the base model
// directory's weights, then a checkpoint's trainable weights (full fine-tuning or LoRA adapters,
// as the checkpoint's manifest says) or a PEFT adapter directory's, on the backend and in the
// compute dtype asked for. No ZeRO: one process holds the whole model.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.h"
#include "model/causal_lm.h"
#include "model/config.h"
#include "model/lora_config.h"
#include "model/param_store.h"

namespace zt {

struct TrainedModelSource {
  std::string model_dir;       // the base model (HF layout)
  std::string checkpoint_dir;  // a checkpoint of a run on model_dir (OUT/checkpoints/<tag>), or empty
  std::string adapter_dir;     // a PEFT adapter directory, or empty (not with a checkpoint)
};

struct TrainedModel {
  ModelConfig config;
  LoraConfig lora;                    // the adapters applied (r 0: none)
  std::unique_ptr<Backend> host;      // the CPU backend the weights were read on
  std::unique_ptr<ParamStore> store;  // on `backend`, in `dtype`
  std::unique_ptr<CausalLM> model;
  DType dtype = DType::F32;
  std::string described;              // "base DIR + checkpoint C (LoRA r 8)" for the banner
};

// Loads `source` onto `backend` in `dtype` (fp32, bf16 or fp16). Errors name the directory and
// what does not fit: a checkpoint of another model, both a checkpoint and an adapter, a 4-bit base
// anywhere but on the CPU in fp32.
TrainedModel load_trained_model(const TrainedModelSource& source, Backend& backend, DType dtype);

}  // namespace zt
