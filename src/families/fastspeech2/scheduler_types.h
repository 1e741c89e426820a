// The scheduler's plug-in types (scheduler/step_kind.h, family.h) under the names the family's
// code uses.
#pragma once

#include "scheduler/family.h"
#include "scheduler/memory_budget.h"
#include "scheduler/step_kind.h"
#include "scheduler/stream.h"
#include "scheduler/voice_pool.h"

namespace voxd::fastspeech2 {

using scheduler::Batch;
using scheduler::Clock;
using scheduler::MemoryBudget;
using scheduler::Pacing;
using scheduler::StepInFlight;
using scheduler::StepKind;
using scheduler::StepOutput;
using scheduler::StepRefusal;
using scheduler::Stream;
using scheduler::VoiceEntry;

}  // namespace voxd::fastspeech2
