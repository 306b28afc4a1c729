// PLACEHOLDER: plan tool — being written.
int main() { return 0; }
