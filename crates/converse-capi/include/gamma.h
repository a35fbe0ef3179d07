/*
 * gamma.h: the GAMMA (Genoa Active Message MAchine) C API, over
 * converse-rs (crate converse-gamma; the C side is converse-capi's
 * `gamma` module). A GAMMA program includes only this header and is
 * built with `convcc`.
 *
 * Every function but gamma_time and gamma_time_diff returns a negative
 * value on error and a non-negative one on success, as the document
 * says; the negative values are converse_gamma::Error::code's.
 *
 * A program is one node per process: gamma_init under `convrun +p N`
 * joins the job's group of N nodes; started by hand with num_nodes other
 * than 1 it restarts the program as N processes through `convrun` (the
 * call does not return then); with num_nodes 1 the process is a group of
 * itself.
 *
 * Differences from the kernel driver, and this implementation's choices:
 *  - Handlers run inside GAMMA calls that deliver messages (gamma_wait,
 *    gamma_test, gamma_sync, flow-controlled sends, gamma_wsend,
 *    gamma_tsend, setting or re-posting a port, gamma_atomic,
 *    gamma_exit), not at interrupt time; they may call anything.
 *  - A buffer bound to a port must stay readable and writable until the
 *    port is bound to another buffer or the node leaves (gamma_exit), even
 *    if no message is due: those calls copy it.
 *  - dest_par_pid 0 (no group has it) sets a port for input only.
 *  - Ports and semaphores are unsigned char here, as in the document's
 *    prototypes: 0..255 (1023 and 1024 stay the collectives').
 *  - GAMMA_ERR_FRAMELOST never happens (Converse delivers whole
 *    messages); GAMMA_ERR_SENDFAILURE is a send whose destination left.
 */
#ifndef CONVERSE_RS_GAMMA_H
#define CONVERSE_RS_GAMMA_H

#ifdef __cplusplus
extern "C" {
#endif

/* dest_node: every node of the destination group but the sender. */
#define BROADCAST 255

/* buffer_kind: where the message after a shorter one goes. */
#define GO_BACK 0  /* to the start of the buffer again */
#define GO_AHEAD 1 /* right after it (gather) */

/* gamma_errno, in an error handler. */
#define GAMMA_ERR_FRAMELOST 2
#define GAMMA_ERR_MSGTOOLONG 3
#define GAMMA_ERR_SENDFAILURE 4

/* A cycle-counter reading: its high and low 32 bits. */
typedef struct {
  unsigned long hi;
  unsigned long lo;
} time_586;

/* Initiate/terminate the parallel section. */
int gamma_init(int num_nodes, int argc, char **argv);
int gamma_exit(void);

/* Communication ports. */
int gamma_set_active_port(unsigned char port, unsigned char dest_node,
                          unsigned char dest_par_pid, unsigned char dest_port,
                          void (*receiver_handler)(void),
                          void (*error_handler)(void),
                          unsigned char semaphore, unsigned char buffer_kind,
                          void *destination_buffer, unsigned long buffer_len);
int gamma_set_passive_port(unsigned char port, unsigned char dest_node,
                           unsigned char dest_par_pid, unsigned char dest_port,
                           unsigned char semaphore, unsigned char buffer_kind,
                           void *destination_buffer, unsigned long buffer_len);
int gamma_post_recv(unsigned char input_port, void *destination_buffer,
                    unsigned long buffer_len);
int gamma_attach_buffer(unsigned char input_port, void *destination_buffer);

/* Blocking sends. The first piece of a two-piece send: at most 20 bytes. */
int gamma_send(unsigned char output_port, void *data, unsigned long len);
int gamma_send_flowctl(unsigned char output_port, void *data,
                       unsigned long len);
int gamma_send_2p(unsigned char output_port, void *data1, unsigned long len1,
                  void *data2, unsigned long len2);
int gamma_send_2p_flowctl(unsigned char output_port, void *data1,
                          unsigned long len1, void *data2,
                          unsigned long len2);

/* Non-blocking sends: a handle for gamma_wsend/gamma_tsend. */
int gamma_isend(unsigned char output_port, void *data, unsigned long len);
int gamma_isend_flowctl(unsigned char output_port, void *data,
                        unsigned long len);
int gamma_isend_2p(unsigned char output_port, void *data1, unsigned long len1,
                   void *data2, unsigned long len2);
int gamma_isend_2p_flowctl(unsigned char output_port, void *data1,
                           unsigned long len1, void *data2,
                           unsigned long len2);
/* 0 once complete; gamma_tsend: 1 if complete, 0 if not yet. */
int gamma_wsend(unsigned long handle);
int gamma_tsend(unsigned long handle);

/* Semaphores. gamma_wait: 0, or minus the errors signalled since the
 * previous wait on sem. */
int gamma_signal(unsigned char sem);
int gamma_sigerr(unsigned char sem);
int gamma_wait(unsigned char sem, unsigned long n);
int gamma_test(unsigned char sem);

/* Miscellaneous. */
int gamma_atomic(void (*funct)(void));
int gamma_sync(void);
int gamma_my_par_pid(void);
int gamma_my_node(void);
int gamma_how_many_nodes(void);
int gamma_mlock(void *buffer, unsigned long len);
int gamma_munlock(void *buffer, unsigned long len);
int gamma_munlockall(void);

/* gamma_time(t): copies the cycle counter into the time_586 variable t
 * (a macro, as in GAMMA's sources). gamma_time_diff(b, a): microseconds
 * from a to b. */
void gamma_time_read_(time_586 *t);
#define gamma_time(t) gamma_time_read_(&(t))
double gamma_time_diff(time_586 b, time_586 a);

/* In a receiver or error handler: the port that triggered it; in an
 * error handler: the condition (GAMMA_ERR_*). */
extern unsigned char gamma_active_port;
extern unsigned char gamma_errno;

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_GAMMA_H */
