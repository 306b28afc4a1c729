// PLACEHOLDER: solver/lp_round.cpp — being written.
#include "solver/strategies.h"
