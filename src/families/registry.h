// The model families this voxd knows: one line per family in registry.cpp (docs/architecture.md
// says how to add one).
#pragma once

#include "scheduler/family.h"

namespace voxd::families {

// Every family, the FastSpeech2 + HiFiGAN family first (the family of configs without "type").
const scheduler::FamilyRegistry& registry();

}  // namespace voxd::families
