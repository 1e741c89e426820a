#include "core/ops.h"
