// CPM from C++: the scanner reads the C++ preprocessor's output (the
// headers' templates, inline functions and extern "C" blocks included).
#include <converse.h>

#include <string>

#include "cxx.cpm.h"

CpmInvokable finish(void) { CsdExitScheduler(); }

CpmInvokable greet(CpmStr who, CpmDim n, double *xs) {
  std::string line = std::string("PE ") + std::to_string(CmiMyPe()) + ": hello " + who + ",";
  for (int i = 0; i < n; i++) line += " " + std::to_string(static_cast<int>(xs[i]));
  CmiPrintf("%s\n", line.c_str());
  Cpm_finish(CpmSend(CpmALL));
}

static void start(int, char **) {
  CpmModuleInit();
  CpmInitializeThisModule();
  if (CmiMyPe() == 0) {
    double xs[3] = {1, 2, 3};
    char who[] = "C++";
    Cpm_greet(CpmSend(CmiNumPes() - 1), who, 3, xs);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
