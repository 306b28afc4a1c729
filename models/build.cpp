// PLACEHOLDER: models/build.cpp — being written.
