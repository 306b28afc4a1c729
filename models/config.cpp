// PLACEHOLDER: models/config.cpp — being written.
