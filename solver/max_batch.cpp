// PLACEHOLDER: solver/max_batch.cpp — being written.
#include "solver/strategies.h"
