// PLACEHOLDER: runtime/graph.cpp — being written.
