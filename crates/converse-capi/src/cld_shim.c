/* Linked by convcc into every Converse program: the seed balancer's
 * entry points under Charm++'s names, weak, over the library's own. A
 * program that defines them links its own balancer instead. */
extern void CmiCldDefaultEnqueue_(int pe, void *msg, int infofn);
extern void CmiCldDefaultEnqueueMulti_(int npes, const int *pes, void *msg, int infofn);
extern void CmiCldDefaultNodeEnqueue_(int node, void *msg, int infofn);
extern const char *CmiCldDefaultGetStrategy_(void);
extern void CmiCldDefaultModuleInit_(void);
extern void CmiCldProgramBalancer_(void (*init)(void));

__attribute__((weak)) void CldEnqueue(int pe, void *msg, int infofn) {
  CmiCldDefaultEnqueue_(pe, msg, infofn);
}
__attribute__((weak)) void CldEnqueueMulti(int npes, const int *pes, void *msg, int infofn) {
  CmiCldDefaultEnqueueMulti_(npes, pes, msg, infofn);
}
__attribute__((weak)) void CldNodeEnqueue(int node, void *msg, int infofn) {
  CmiCldDefaultNodeEnqueue_(node, msg, infofn);
}
__attribute__((weak)) const char *CldGetStrategy(void) { return CmiCldDefaultGetStrategy_(); }

static void library_module_init(void) { CmiCldDefaultModuleInit_(); }
extern void CldModuleInit(void) __attribute__((weak, alias("library_module_init")));

__attribute__((constructor)) static void converse_rs_cld_program_balancer(void) {
  void (*init)(void) = CldModuleInit;
  if (init != library_module_init) CmiCldProgramBalancer_(init);
}
