// PLACEHOLDER: solver/problem.cpp — being written.
#include "solver/strategies.h"
