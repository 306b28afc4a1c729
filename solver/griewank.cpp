// PLACEHOLDER: solver/griewank.cpp — being written.
#include "solver/strategies.h"
