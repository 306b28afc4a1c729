// PLACEHOLDER: solver/schedule.cpp — being written.
#include "solver/strategies.h"
