// PLACEHOLDER: solver/solve.cpp — being written.
#include "solver/strategies.h"
