// PLACEHOLDER: solver/simulate.cpp — being written.
#include "solver/strategies.h"
