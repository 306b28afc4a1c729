// PLACEHOLDER: models/data.cpp — being written.
