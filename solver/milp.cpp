// PLACEHOLDER: solver/milp.cpp — being written.
#include "solver/strategies.h"
