// PLACEHOLDER: solver/baselines.cpp — being written.
#include "solver/strategies.h"
