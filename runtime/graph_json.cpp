// PLACEHOLDER: runtime/graph_json.cpp — being written.
