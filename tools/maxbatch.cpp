// PLACEHOLDER: maxbatch tool — being written.
int main() { return 0; }
