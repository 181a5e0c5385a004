#pragma once
/// Number formatting moved down to the run model's layer (harness/report/format.h), where the checks engine uses it
/// too; this header forwards for the renderers that include it here.

#include "harness/report/format.h"
