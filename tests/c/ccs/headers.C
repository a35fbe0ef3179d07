// Both CCS headers in one C++ translation unit (extern "C", C++-clean),
// printing the layout of the structs C shares with the runtime; the Rust
// test compares it with the Rust definitions.
#include <conv-ccs.h>
#include <ccs-client.h>

#include <cstddef>
#include <cstdio>

int main() {
  std::printf("CcsServer %zu\n", sizeof(CcsServer));
  std::printf("hostAddr %zu\n", offsetof(CcsServer, hostAddr));
  std::printf("hostIP %zu\n", offsetof(CcsServer, hostIP));
  std::printf("hostPort %zu\n", offsetof(CcsServer, hostPort));
  std::printf("isAuth %zu\n", offsetof(CcsServer, isAuth));
  std::printf("level %zu\n", offsetof(CcsServer, level));
  std::printf("numNodes %zu\n", offsetof(CcsServer, numNodes));
  std::printf("numPes %zu\n", offsetof(CcsServer, numPes));
  std::printf("numProcs %zu\n", offsetof(CcsServer, numProcs));
  std::printf("client_ %zu\n", offsetof(CcsServer, client_));
  std::printf("CcsSec_secretKey %zu\n", sizeof(CcsSec_secretKey));
  std::printf("skt_ip_t %zu\n", sizeof(skt_ip_t));
  std::printf("CcsDelayedReply %zu\n", sizeof(CcsDelayedReply));
  std::printf("CcsImplHeader %zu len %zu\n", sizeof(CcsImplHeader), offsetof(CcsImplHeader, len));
  ChMessageInt_t x = ChMessageInt_new(0x01020304u);
  std::printf("ChMessageInt %u %u %x\n", x.data[0], x.data[3], ChMessageInt(x));
  return 0;
}
