/*
 * converse-rs/absent.h: Charm++'s Converse names that converse-rs does not
 * have, each declared so that any use of it is a compile-time error that
 * names it and says why (docs/c-abi-names.tsv lists every name of Charm++'s
 * Converse headers, there or absent, with the reason; docs/c-abi.md says
 * more). Included at the end of converse.h, and of the headers a program
 * may include without it (pup_c.h, queueing.h, ccs-client.h).
 *
 * Each is `void NAME(...)` in C++ and `void NAME()` in C (any arguments),
 * marked `unavailable` where the compiler has it (GCC 12, clang: any
 * reference is an error) and `error` elsewhere (GCC: an error for each call
 * left after optimisation). A program that defines NAME as a macro before
 * including converse.h keeps its own. Names a program may define itself
 * (a balancer's CldEnqueueGroup, CthUserAddListeners, generic macro names
 * such as ALIGN8) are not here.
 */
#ifndef CONVERSE_RS_CONVERSE_RS_ABSENT_H
#define CONVERSE_RS_CONVERSE_RS_ABSENT_H

#if defined(__has_attribute)
#if __has_attribute(unavailable)
#define CONVERSE_RS_ABSENT_ATTR_(msg) __attribute__((unavailable(msg)))
#elif __has_attribute(error)
#define CONVERSE_RS_ABSENT_ATTR_(msg) __attribute__((error(msg)))
#endif
#elif defined(__GNUC__)
#define CONVERSE_RS_ABSENT_ATTR_(msg) __attribute__((error(msg)))
#endif
#ifndef CONVERSE_RS_ABSENT_ATTR_
#define CONVERSE_RS_ABSENT_ATTR_(msg) /* no such attribute: the link fails instead */
#endif

/* (...) in C++ and C23; () in older C, where it takes any arguments too
 * (-Wstrict-prototypes is silenced for these declarations). */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ > 201710L)
#define CONVERSE_RS_ABSENT_PARAMS_ (...)
#else
#define CONVERSE_RS_ABSENT_PARAMS_ ()
#endif
#define CONVERSE_RS_ABSENT_(name, reason)     \
  void name CONVERSE_RS_ABSENT_PARAMS_       \
      CONVERSE_RS_ABSENT_ATTR_(#name " is not in converse-rs: " reason "; see docs/c-abi.md")

#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#endif
#ifdef __cplusplus
extern "C" {
#endif

/* conv-core/converse.h */
#ifndef CcdCallBacks
CONVERSE_RS_ABSENT_(CcdCallBacks, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CcdCallFnAfterOnPE
CONVERSE_RS_ABSENT_(CcdCallFnAfterOnPE, "no Ccd*OnPE in converse-rs (docs/c-abi.md)");
#endif
#ifndef CcdCallOnConditionKeepOnPE
CONVERSE_RS_ABSENT_(CcdCallOnConditionKeepOnPE, "no Ccd*OnPE in converse-rs (docs/c-abi.md)");
#endif
#ifndef CcdCallOnConditionOnPE
CONVERSE_RS_ABSENT_(CcdCallOnConditionOnPE, "no Ccd*OnPE in converse-rs (docs/c-abi.md)");
#endif
#ifndef CcdNumTimerCBs
CONVERSE_RS_ABSENT_(CcdNumTimerCBs, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CfutureValueData
CONVERSE_RS_ABSENT_(CfutureValueData, "futures' internal value layout, not in converse-rs (CfutureWait returns the value)");
#endif
#ifndef CldRegisterEstimator
CONVERSE_RS_ABSENT_(CldRegisterEstimator, "no load estimators in converse-rs (docs/c-abi.md)");
#endif
#ifndef CMI_BROADCAST_ROOT
CONVERSE_RS_ABSENT_(CMI_BROADCAST_ROOT, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_IS_ZC
CONVERSE_RS_ABSENT_(CMI_IS_ZC, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_IS_ZC_BCAST
CONVERSE_RS_ABSENT_(CMI_IS_ZC_BCAST, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_IS_ZC_DEVICE
CONVERSE_RS_ABSENT_(CMI_IS_ZC_DEVICE, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_IS_ZC_P2P
CONVERSE_RS_ABSENT_(CMI_IS_ZC_P2P, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_IS_ZC_RECV
CONVERSE_RS_ABSENT_(CMI_IS_ZC_RECV, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_LIKELY
CONVERSE_RS_ABSENT_(CMI_LIKELY, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CMI_MSG_NOKEEP
CONVERSE_RS_ABSENT_(CMI_MSG_NOKEEP, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_SET_BROADCAST_ROOT
CONVERSE_RS_ABSENT_(CMI_SET_BROADCAST_ROOT, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CMI_UNLIKELY
CONVERSE_RS_ABSENT_(CMI_UNLIKELY, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CMI_ZC_MSGTYPE
CONVERSE_RS_ABSENT_(CMI_ZC_MSGTYPE, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CmiAlignedAlloc
CONVERSE_RS_ABSENT_(CmiAlignedAlloc, "aligned allocation helpers, not in converse-rs; use aligned_alloc/posix_memalign");
#endif
#ifndef CmiAlignedFree
CONVERSE_RS_ABSENT_(CmiAlignedFree, "aligned allocation helpers, not in converse-rs; use aligned_alloc/posix_memalign");
#endif
#ifndef CmiAssignOnce
CONVERSE_RS_ABSENT_(CmiAssignOnce, "one-time atomic store helper of Charm++'s runtime, not in converse-rs");
#endif
#ifndef CmiAsyncBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiAsyncBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncBroadcastFn
CONVERSE_RS_ABSENT_(CmiAsyncBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncListSendFn
CONVERSE_RS_ABSENT_(CmiAsyncListSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncMulticastFn
CONVERSE_RS_ABSENT_(CmiAsyncMulticastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncNodeBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiAsyncNodeBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncNodeBroadcastFn
CONVERSE_RS_ABSENT_(CmiAsyncNodeBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncNodeSendFn
CONVERSE_RS_ABSENT_(CmiAsyncNodeSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiAsyncSendFn
CONVERSE_RS_ABSENT_(CmiAsyncSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiBacktraceLookup
CONVERSE_RS_ABSENT_(CmiBacktraceLookup, "no backtrace helpers in converse-rs");
#endif
#ifndef CmiBacktracePrint
CONVERSE_RS_ABSENT_(CmiBacktracePrint, "no backtrace helpers in converse-rs");
#endif
#ifndef CmiBacktraceRecord
CONVERSE_RS_ABSENT_(CmiBacktraceRecord, "no backtrace helpers in converse-rs");
#endif
#ifndef CmiBarrier
CONVERSE_RS_ABSENT_(CmiBarrier, "no global barrier call in converse-rs (CmiNodeBarrier is there)");
#endif
#ifndef CmiBarrierZero
CONVERSE_RS_ABSENT_(CmiBarrierZero, "no global barrier call in converse-rs (CmiNodeBarrier is there)");
#endif
#ifndef CmiBecomeImmediate
CONVERSE_RS_ABSENT_(CmiBecomeImmediate, "no immediate messages in converse-rs");
#endif
#ifndef CmiCheckImmediateLock
CONVERSE_RS_ABSENT_(CmiCheckImmediateLock, "no immediate messages in converse-rs");
#endif
#ifndef CmiClearImmediateFlag
CONVERSE_RS_ABSENT_(CmiClearImmediateFlag, "no immediate messages in converse-rs");
#endif
#ifndef CmiCopyMsg
CONVERSE_RS_ABSENT_(CmiCopyMsg, "not in converse-rs; copy with CmiAlloc and memcpy");
#endif
#ifndef CmiCreateImmediateLock
CONVERSE_RS_ABSENT_(CmiCreateImmediateLock, "no immediate messages in converse-rs");
#endif
#ifndef CmiCreateNotifyCommThdMsg
CONVERSE_RS_ABSENT_(CmiCreateNotifyCommThdMsg, "comm-thread builds only (CMK_LEVERAGE_COMMTHREAD), not in converse-rs");
#endif
#ifndef CmiCreatePartitions
CONVERSE_RS_ABSENT_(CmiCreatePartitions, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiDelayImmediate
CONVERSE_RS_ABSENT_(CmiDelayImmediate, "no immediate messages in converse-rs");
#endif
#ifndef CmiDeliversInit
CONVERSE_RS_ABSENT_(CmiDeliversInit, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CmiEnableUrgentSend
CONVERSE_RS_ABSENT_(CmiEnableUrgentSend, "out-of-band urgent sends (CMK_USE_OOB), not in converse-rs");
#endif
#ifndef CmiEndianness
CONVERSE_RS_ABSENT_(CmiEndianness, "not in converse-rs (all PEs of a job share one byte order)");
#endif
#ifndef CmiFclose
CONVERSE_RS_ABSENT_(CmiFclose, "Charm++'s I/O wrappers, not in converse-rs; use the C library");
#endif
#ifndef CmiFopen
CONVERSE_RS_ABSENT_(CmiFopen, "Charm++'s I/O wrappers, not in converse-rs; use the C library");
#endif
#ifndef CmiFreeAligned
CONVERSE_RS_ABSENT_(CmiFreeAligned, "aligned allocation helpers, not in converse-rs; use aligned_alloc/posix_memalign");
#endif
#ifndef CmiFreeBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiFreeBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeBroadcastFn
CONVERSE_RS_ABSENT_(CmiFreeBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeListSendFn
CONVERSE_RS_ABSENT_(CmiFreeListSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeMulticastFn
CONVERSE_RS_ABSENT_(CmiFreeMulticastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeNodeBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiFreeNodeBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeNodeBroadcastFn
CONVERSE_RS_ABSENT_(CmiFreeNodeBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeNodeListSendFn
CONVERSE_RS_ABSENT_(CmiFreeNodeListSendFn, "within-node broadcasts and node list sends, not in converse-rs");
#endif
#ifndef CmiFreeNodeSendFn
CONVERSE_RS_ABSENT_(CmiFreeNodeSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFreeNotifyCommThdMsg
CONVERSE_RS_ABSENT_(CmiFreeNotifyCommThdMsg, "comm-thread builds only (CMK_LEVERAGE_COMMTHREAD), not in converse-rs");
#endif
#ifndef CmiFreeSendFn
CONVERSE_RS_ABSENT_(CmiFreeSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiFwrite
CONVERSE_RS_ABSENT_(CmiFwrite, "Charm++'s I/O wrappers, not in converse-rs; use the C library");
#endif
#ifndef CmiGetCluster
CONVERSE_RS_ABSENT_(CmiGetCluster, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGetCurKnownOmpThreads
CONVERSE_RS_ABSENT_(CmiGetCurKnownOmpThreads, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CmiGetHandlerInfo
CONVERSE_RS_ABSENT_(CmiGetHandlerInfo, "the handler table is the runtime's, not exposed by converse-rs (use CmiHandlerToFunction)");
#endif
#ifndef CmiGetNodeGlobal
CONVERSE_RS_ABSENT_(CmiGetNodeGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiGetNodeLocal
CONVERSE_RS_ABSENT_(CmiGetNodeLocal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiGetNonLocal
CONVERSE_RS_ABSENT_(CmiGetNonLocal, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CmiGetPageSize
CONVERSE_RS_ABSENT_(CmiGetPageSize, "file-system helpers, not in converse-rs; use the C library");
#endif
#ifndef CmiGetPeGlobal
CONVERSE_RS_ABSENT_(CmiGetPeGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiGetPeLocal
CONVERSE_RS_ABSENT_(CmiGetPeLocal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiGetRedID
CONVERSE_RS_ABSENT_(CmiGetRedID, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CmiGetReductionDestination
CONVERSE_RS_ABSENT_(CmiGetReductionDestination, "the reduction machinery's internals, not exposed by converse-rs");
#endif
#ifndef CmiGetReductionHandler
CONVERSE_RS_ABSENT_(CmiGetReductionHandler, "the reduction machinery's internals, not exposed by converse-rs");
#endif
#ifndef CmiGetReference
CONVERSE_RS_ABSENT_(CmiGetReference, "CmiAlloc chunk-header internals, not in converse-rs");
#endif
#ifndef CmiGetRoot
CONVERSE_RS_ABSENT_(CmiGetRoot, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CmiGridQueueDeregister
CONVERSE_RS_ABSENT_(CmiGridQueueDeregister, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueDeregisterAll
CONVERSE_RS_ABSENT_(CmiGridQueueDeregisterAll, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueGetInterval
CONVERSE_RS_ABSENT_(CmiGridQueueGetInterval, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueGetThreshold
CONVERSE_RS_ABSENT_(CmiGridQueueGetThreshold, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueLookup
CONVERSE_RS_ABSENT_(CmiGridQueueLookup, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueLookupMsg
CONVERSE_RS_ABSENT_(CmiGridQueueLookupMsg, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGridQueueRegister
CONVERSE_RS_ABSENT_(CmiGridQueueRegister, "grid-queue builds only (CMK_GRID_QUEUE_AVAILABLE), not in converse-rs");
#endif
#ifndef CmiGroupInit
CONVERSE_RS_ABSENT_(CmiGroupInit, "multicast groups need no initialisation call in converse-rs");
#endif
#ifndef CmiHandleMessage
CONVERSE_RS_ABSENT_(CmiHandleMessage, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CmiHandlerToInfo
CONVERSE_RS_ABSENT_(CmiHandlerToInfo, "the handler table is the runtime's, not exposed by converse-rs (use CmiHandlerToFunction)");
#endif
#ifndef CmiILog2
CONVERSE_RS_ABSENT_(CmiILog2, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiImmediateHandler
CONVERSE_RS_ABSENT_(CmiImmediateHandler, "no immediate messages in converse-rs");
#endif
#ifndef CmiImmediateLock
CONVERSE_RS_ABSENT_(CmiImmediateLock, "no immediate messages in converse-rs");
#endif
#ifndef CmiImmediateUnlock
CONVERSE_RS_ABSENT_(CmiImmediateUnlock, "no immediate messages in converse-rs");
#endif
#ifndef CmiImmIsRunning
CONVERSE_RS_ABSENT_(CmiImmIsRunning, "no immediate messages in converse-rs");
#endif
#ifndef CmiInCommThread
CONVERSE_RS_ABSENT_(CmiInCommThread, "no communication threads in converse-rs");
#endif
#ifndef CmiInitCounters
CONVERSE_RS_ABSENT_(CmiInitCounters, "hardware performance counters, not in converse-rs");
#endif
#ifndef CmiInitHwlocTopology
CONVERSE_RS_ABSENT_(CmiInitHwlocTopology, "CPU affinity by logical core and hwloc topology, not in converse-rs");
#endif
#ifndef CmiInitTime
CONVERSE_RS_ABSENT_(CmiInitTime, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiInterFreeNodeSendFn
CONVERSE_RS_ABSENT_(CmiInterFreeNodeSendFn, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterFreeSendFn
CONVERSE_RS_ABSENT_(CmiInterFreeSendFn, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncNodeSend
CONVERSE_RS_ABSENT_(CmiInterSyncNodeSend, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncNodeSendAndFree
CONVERSE_RS_ABSENT_(CmiInterSyncNodeSendAndFree, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncNodeSendFn
CONVERSE_RS_ABSENT_(CmiInterSyncNodeSendFn, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncSend
CONVERSE_RS_ABSENT_(CmiInterSyncSend, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncSendAndFree
CONVERSE_RS_ABSENT_(CmiInterSyncSendAndFree, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiInterSyncSendFn
CONVERSE_RS_ABSENT_(CmiInterSyncSendFn, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiIsFortranLibraryCall
CONVERSE_RS_ABSENT_(CmiIsFortranLibraryCall, "Fortran/AMPI interoperation, not in converse-rs");
#endif
#ifndef CmiIsImmediate
CONVERSE_RS_ABSENT_(CmiIsImmediate, "no immediate messages in converse-rs");
#endif
#ifndef CmiIsPow2
CONVERSE_RS_ABSENT_(CmiIsPow2, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiIsPow2OrZero
CONVERSE_RS_ABSENT_(CmiIsPow2OrZero, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiLog2
CONVERSE_RS_ABSENT_(CmiLog2, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiLongSendQueue
CONVERSE_RS_ABSENT_(CmiLongSendQueue, "machine-layer send-queue query, not in converse-rs");
#endif
#ifndef CmiMachineProgressImpl
CONVERSE_RS_ABSENT_(CmiMachineProgressImpl, "machine-layer network progress, not in converse-rs (its progress needs no call)");
#endif
#ifndef CmiMallocAligned
CONVERSE_RS_ABSENT_(CmiMallocAligned, "aligned allocation helpers, not in converse-rs; use aligned_alloc/posix_memalign");
#endif
#ifndef CmiMaxMemoryUsage
CONVERSE_RS_ABSENT_(CmiMaxMemoryUsage, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMaxMemoryUsageR
CONVERSE_RS_ABSENT_(CmiMaxMemoryUsageR, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemcpy
CONVERSE_RS_ABSENT_(CmiMemcpy, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiMemLock
CONVERSE_RS_ABSENT_(CmiMemLock, "machine-layer lock internals, not in converse-rs");
#endif
#ifndef CmiMemoryCheck
CONVERSE_RS_ABSENT_(CmiMemoryCheck, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemoryIs
CONVERSE_RS_ABSENT_(CmiMemoryIs, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemoryMark
CONVERSE_RS_ABSENT_(CmiMemoryMark, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemoryMarkBlock
CONVERSE_RS_ABSENT_(CmiMemoryMarkBlock, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemorySweep
CONVERSE_RS_ABSENT_(CmiMemorySweep, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemoryUsage
CONVERSE_RS_ABSENT_(CmiMemoryUsage, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemoryUsageReporter
CONVERSE_RS_ABSENT_(CmiMemoryUsageReporter, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMemUnlock
CONVERSE_RS_ABSENT_(CmiMemUnlock, "machine-layer lock internals, not in converse-rs");
#endif
#ifndef CmiMinMemoryUsage
CONVERSE_RS_ABSENT_(CmiMinMemoryUsage, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiMkdir
CONVERSE_RS_ABSENT_(CmiMkdir, "file-system helpers, not in converse-rs; use the C library");
#endif
#ifndef CmiMultipleIsend
CONVERSE_RS_ABSENT_(CmiMultipleIsend, "no CmiMultipleIsend in converse-rs (CmiMultipleSend is there)");
#endif
#ifndef CmiMyNodeGlobal
CONVERSE_RS_ABSENT_(CmiMyNodeGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiMyPartition
CONVERSE_RS_ABSENT_(CmiMyPartition, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiMyPartitionSize
CONVERSE_RS_ABSENT_(CmiMyPartitionSize, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiMyPeGlobal
CONVERSE_RS_ABSENT_(CmiMyPeGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiMyRank_
CONVERSE_RS_ABSENT_(CmiMyRank_, "machine-layer internal (Charm++'s CmiMyRank implementation)");
#endif
#ifndef CmiNodeSpan
CONVERSE_RS_ABSENT_(CmiNodeSpan, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiNotifyCommThd
CONVERSE_RS_ABSENT_(CmiNotifyCommThd, "comm-thread builds only (CMK_LEVERAGE_COMMTHREAD), not in converse-rs");
#endif
#ifndef CmiNotifyIdle
CONVERSE_RS_ABSENT_(CmiNotifyIdle, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CmiNumNodesGlobal
CONVERSE_RS_ABSENT_(CmiNumNodesGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiNumPartitions
CONVERSE_RS_ABSENT_(CmiNumPartitions, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiNumPesGlobal
CONVERSE_RS_ABSENT_(CmiNumPesGlobal, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiOnCore
CONVERSE_RS_ABSENT_(CmiOnCore, "CPU affinity by logical core and hwloc topology, not in converse-rs");
#endif
#ifndef CmiOpen
CONVERSE_RS_ABSENT_(CmiOpen, "Charm++'s I/O wrappers, not in converse-rs; use the C library");
#endif
#ifndef CmiOutOfMemory
CONVERSE_RS_ABSENT_(CmiOutOfMemory, "not in converse-rs (an allocation failure ends the job inside the runtime)");
#endif
#ifndef CmiPartitionSize
CONVERSE_RS_ABSENT_(CmiPartitionSize, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiPrintDate
CONVERSE_RS_ABSENT_(CmiPrintDate, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiPrintStackTrace
CONVERSE_RS_ABSENT_(CmiPrintStackTrace, "no backtrace helpers in converse-rs");
#endif
#ifndef CmiProbeImmediateMsg
CONVERSE_RS_ABSENT_(CmiProbeImmediateMsg, "no immediate messages in converse-rs");
#endif
#ifndef CmiPushPE
CONVERSE_RS_ABSENT_(CmiPushPE, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CmiPwrite
CONVERSE_RS_ABSENT_(CmiPwrite, "Charm++'s I/O wrappers, not in converse-rs; use the C library");
#endif
#ifndef CmiRdmaFree
CONVERSE_RS_ABSENT_(CmiRdmaFree, "machine-layer internal (zero-copy/RDMA buffers), not in converse-rs");
#endif
#ifndef CmiReadSize
CONVERSE_RS_ABSENT_(CmiReadSize, "not in converse-rs");
#endif
#ifndef CmiReduceMergeFn_random
CONVERSE_RS_ABSENT_(CmiReduceMergeFn_random, "the reduction machinery's internals, not exposed by converse-rs");
#endif
#ifndef CmiResetGlobalNodeReduceSeqID
CONVERSE_RS_ABSENT_(CmiResetGlobalNodeReduceSeqID, "the reduction machinery's internals, not exposed by converse-rs");
#endif
#ifndef CmiResetGlobalReduceSeqID
CONVERSE_RS_ABSENT_(CmiResetGlobalReduceSeqID, "the reduction machinery's internals, not exposed by converse-rs");
#endif
#ifndef CmiResetImmediate
CONVERSE_RS_ABSENT_(CmiResetImmediate, "no immediate messages in converse-rs");
#endif
#ifndef CmiResetMaxMemory
CONVERSE_RS_ABSENT_(CmiResetMaxMemory, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiResetMinMemory
CONVERSE_RS_ABSENT_(CmiResetMinMemory, "Charm++ -memory modes (memory checking, leak and usage tracking), not in converse-rs");
#endif
#ifndef CmiResetNotifyCommThdMsg
CONVERSE_RS_ABSENT_(CmiResetNotifyCommThdMsg, "comm-thread builds only (CMK_LEVERAGE_COMMTHREAD), not in converse-rs");
#endif
#ifndef CmiRoundUpToPow2
CONVERSE_RS_ABSENT_(CmiRoundUpToPow2, "Charm++ compiler and portability helper macro, not in converse-rs");
#endif
#ifndef CmiScanf
CONVERSE_RS_ABSENT_(CmiScanf, "no CmiScanf in converse-rs (input goes to the program's own stdin)");
#endif
#ifndef CmiSetCPUAffinityLogical
CONVERSE_RS_ABSENT_(CmiSetCPUAffinityLogical, "CPU affinity by logical core and hwloc topology, not in converse-rs");
#endif
#ifndef CmiSetCustomPartitioning
CONVERSE_RS_ABSENT_(CmiSetCustomPartitioning, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiSetMasterPartition
CONVERSE_RS_ABSENT_(CmiSetMasterPartition, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiSetNumPartitions
CONVERSE_RS_ABSENT_(CmiSetNumPartitions, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiSetPartitionScheme
CONVERSE_RS_ABSENT_(CmiSetPartitionScheme, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiSetPartitionSizes
CONVERSE_RS_ABSENT_(CmiSetPartitionSizes, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef CmiSetPeHelpsOtherThreads
CONVERSE_RS_ABSENT_(CmiSetPeHelpsOtherThreads, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CmiSetRedID
CONVERSE_RS_ABSENT_(CmiSetRedID, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CmiSetRoot
CONVERSE_RS_ABSENT_(CmiSetRoot, "message header fields converse-rs does not have (its header is the 32-byte core header)");
#endif
#ifndef CmiStartCounters
CONVERSE_RS_ABSENT_(CmiStartCounters, "hardware performance counters, not in converse-rs");
#endif
#ifndef CmiStartTimer
CONVERSE_RS_ABSENT_(CmiStartTimer, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiStopCounters
CONVERSE_RS_ABSENT_(CmiStopCounters, "hardware performance counters, not in converse-rs");
#endif
#ifndef CmiSuspendedTaskEnqueue
CONVERSE_RS_ABSENT_(CmiSuspendedTaskEnqueue, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CmiSuspendedTaskPop
CONVERSE_RS_ABSENT_(CmiSuspendedTaskPop, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CmiSvAlloc
CONVERSE_RS_ABSENT_(CmiSvAlloc, "no CmiSvAlloc in converse-rs; use CmiAlloc");
#endif
#ifndef CmiSwitchToPE
CONVERSE_RS_ABSENT_(CmiSwitchToPE, "no Ccd*OnPE in converse-rs (docs/c-abi.md)");
#endif
#ifndef CmiSyncBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiSyncBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncBroadcastFn
CONVERSE_RS_ABSENT_(CmiSyncBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncListSendFn
CONVERSE_RS_ABSENT_(CmiSyncListSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncMulticastFn
CONVERSE_RS_ABSENT_(CmiSyncMulticastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncNodeBroadcastAllFn
CONVERSE_RS_ABSENT_(CmiSyncNodeBroadcastAllFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncNodeBroadcastFn
CONVERSE_RS_ABSENT_(CmiSyncNodeBroadcastFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncNodeSendFn
CONVERSE_RS_ABSENT_(CmiSyncNodeSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiSyncSendFn
CONVERSE_RS_ABSENT_(CmiSyncSendFn, "Charm++'s functions behind its send macros; converse-rs exports the send names themselves (CmiSyncSend, ...)");
#endif
#ifndef CmiThreadIs
CONVERSE_RS_ABSENT_(CmiThreadIs, "Charm++'s thread-implementation flags (QT, ucontext, ...), not in converse-rs");
#endif
#ifndef CmiTimerAbsolute
CONVERSE_RS_ABSENT_(CmiTimerAbsolute, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiTimerInit
CONVERSE_RS_ABSENT_(CmiTimerInit, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiTimerIsSynchronized
CONVERSE_RS_ABSENT_(CmiTimerIsSynchronized, "Charm++ timer start-up and clock queries, not in converse-rs (CmiWallTimer, CmiCpuTimer, CmiTimer are there)");
#endif
#ifndef CmiTmpAlloc
CONVERSE_RS_ABSENT_(CmiTmpAlloc, "no temporary-buffer allocator in converse-rs; use malloc");
#endif
#ifndef CmiTmpFree
CONVERSE_RS_ABSENT_(CmiTmpFree, "no temporary-buffer allocator in converse-rs; use malloc");
#endif
#ifndef CmiTurnOffStats
CONVERSE_RS_ABSENT_(CmiTurnOffStats, "Cray uGNI statistics, not in converse-rs");
#endif
#ifndef CmiTurnOnStats
CONVERSE_RS_ABSENT_(CmiTurnOnStats, "Cray uGNI statistics, not in converse-rs");
#endif
#ifndef CmiWithinNodeBroadcast
CONVERSE_RS_ABSENT_(CmiWithinNodeBroadcast, "within-node broadcasts and node list sends, not in converse-rs");
#endif
#ifndef CmiWithinNodeBroadcastFn
CONVERSE_RS_ABSENT_(CmiWithinNodeBroadcastFn, "within-node broadcasts and node list sends, not in converse-rs");
#endif
#ifndef CmmFreeAll
CONVERSE_RS_ABSENT_(CmmFreeAll, "not in converse-rs (CmmFree frees the table and its entries)");
#endif
#ifndef CmmGetLastTag
CONVERSE_RS_ABSENT_(CmmGetLastTag, "not in converse-rs");
#endif
#ifndef CmmPup
CONVERSE_RS_ABSENT_(CmmPup, "no CmmPup in converse-rs (docs/c-abi.md)");
#endif
#ifndef CommunicationServerPxshm
CONVERSE_RS_ABSENT_(CommunicationServerPxshm, "machine-layer network progress, not in converse-rs (its progress needs no call)");
#endif
#ifndef ConverseCleanup
CONVERSE_RS_ABSENT_(ConverseCleanup, "no shrink/expand in converse-rs");
#endif
#ifndef CpdSetInitializeMemory
CONVERSE_RS_ABSENT_(CpdSetInitializeMemory, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef CpdSystemEnter
CONVERSE_RS_ABSENT_(CpdSystemEnter, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef CpdSystemExit
CONVERSE_RS_ABSENT_(CpdSystemExit, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef CpvAccessOther
CONVERSE_RS_ABSENT_(CpvAccessOther, "not in converse-rs: Cpv values are thread-locals, another PE's is out of reach (docs/c-abi.md)");
#endif
#ifndef CsdBeginIdle
CONVERSE_RS_ABSENT_(CsdBeginIdle, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdEndIdle
CONVERSE_RS_ABSENT_(CsdEndIdle, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdNextLocalNodeMessage
CONVERSE_RS_ABSENT_(CsdNextLocalNodeMessage, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdNextMessage
CONVERSE_RS_ABSENT_(CsdNextMessage, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdPeriodic
CONVERSE_RS_ABSENT_(CsdPeriodic, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdResetPeriodic
CONVERSE_RS_ABSENT_(CsdResetPeriodic, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdScheduleNodePoll
CONVERSE_RS_ABSENT_(CsdScheduleNodePoll, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdSchedulerState_new
CONVERSE_RS_ABSENT_(CsdSchedulerState_new, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdStillIdle
CONVERSE_RS_ABSENT_(CsdStillIdle, "the scheduler's queues and state are the runtime's, not exposed by converse-rs (use the Csd calls)");
#endif
#ifndef CsdTaskEnqueue
CONVERSE_RS_ABSENT_(CsdTaskEnqueue, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CsdTaskPop
CONVERSE_RS_ABSENT_(CsdTaskPop, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CtgCreate
CONVERSE_RS_ABSENT_(CtgCreate, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CtgCurrentGlobals
CONVERSE_RS_ABSENT_(CtgCurrentGlobals, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CtgGetSize
CONVERSE_RS_ABSENT_(CtgGetSize, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CtgInit
CONVERSE_RS_ABSENT_(CtgInit, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CtgInstall
CONVERSE_RS_ABSENT_(CtgInstall, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CtgUninstall
CONVERSE_RS_ABSENT_(CtgUninstall, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CthAddListener
CONVERSE_RS_ABSENT_(CthAddListener, "no thread listeners in converse-rs");
#endif
#ifndef CthAutoYield
CONVERSE_RS_ABSENT_(CthAutoYield, "preemptive threads: unimplemented in Charm++ too, not in converse-rs");
#endif
#ifndef CthAutoYieldBlock
CONVERSE_RS_ABSENT_(CthAutoYieldBlock, "preemptive threads: unimplemented in Charm++ too, not in converse-rs");
#endif
#ifndef CthAutoYieldFreq
CONVERSE_RS_ABSENT_(CthAutoYieldFreq, "preemptive threads: unimplemented in Charm++ too, not in converse-rs");
#endif
#ifndef CthAutoYieldUnblock
CONVERSE_RS_ABSENT_(CthAutoYieldUnblock, "preemptive threads: unimplemented in Charm++ too, not in converse-rs");
#endif
#ifndef CthGetCurrentThread
CONVERSE_RS_ABSENT_(CthGetCurrentThread, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthGetData
CONVERSE_RS_ABSENT_(CthGetData, "Charm++'s Ctv implementation (Cpv-based thread data), not in converse-rs");
#endif
#ifndef CthGetThreadID
CONVERSE_RS_ABSENT_(CthGetThreadID, "Charm++ trace/projections, not in converse-rs");
#endif
#ifndef CthGetToken
CONVERSE_RS_ABSENT_(CthGetToken, "thread tokens are the runtime's in converse-rs (a strategy gets the CthThread)");
#endif
#ifndef CthInterceptionsDeactivatePop
CONVERSE_RS_ABSENT_(CthInterceptionsDeactivatePop, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CthInterceptionsDeactivatePush
CONVERSE_RS_ABSENT_(CthInterceptionsDeactivatePush, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CthInterceptionsTemporarilyActivateEnd
CONVERSE_RS_ABSENT_(CthInterceptionsTemporarilyActivateEnd, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CthInterceptionsTemporarilyActivateStart
CONVERSE_RS_ABSENT_(CthInterceptionsTemporarilyActivateStart, "no global-variable privatization (Ctg, -swapglobals) in converse-rs");
#endif
#ifndef CthIsSuspendable
CONVERSE_RS_ABSENT_(CthIsSuspendable, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthPointer
CONVERSE_RS_ABSENT_(CthPointer, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthPrintThdMagic
CONVERSE_RS_ABSENT_(CthPrintThdMagic, "thread debugging dumps of Charm++, not in converse-rs");
#endif
#ifndef CthPrintThdStack
CONVERSE_RS_ABSENT_(CthPrintThdStack, "thread debugging dumps of Charm++, not in converse-rs");
#endif
#ifndef CthRegister
CONVERSE_RS_ABSENT_(CthRegister, "Charm++'s Ctv implementation (Cpv-based thread data), not in converse-rs");
#endif
#ifndef CthRegistered
CONVERSE_RS_ABSENT_(CthRegistered, "Charm++'s Ctv implementation (Cpv-based thread data), not in converse-rs");
#endif
#ifndef CthScheduled
CONVERSE_RS_ABSENT_(CthScheduled, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthScheduledDecrement
CONVERSE_RS_ABSENT_(CthScheduledDecrement, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthSetEventInfo
CONVERSE_RS_ABSENT_(CthSetEventInfo, "Charm++ trace/projections, not in converse-rs");
#endif
#ifndef CthSetPrev
CONVERSE_RS_ABSENT_(CthSetPrev, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthSetSerialNo
CONVERSE_RS_ABSENT_(CthSetSerialNo, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthSetStrategySuspendedWorkStealing
CONVERSE_RS_ABSENT_(CthSetStrategySuspendedWorkStealing, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthSetStrategyWorkStealing
CONVERSE_RS_ABSENT_(CthSetStrategyWorkStealing, "task-queue and OpenMP builds only (CMK_TASKQUEUE, CMK_OMP), not in converse-rs");
#endif
#ifndef CthSetSuspendable
CONVERSE_RS_ABSENT_(CthSetSuspendable, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthSetThreadID
CONVERSE_RS_ABSENT_(CthSetThreadID, "Charm++ trace/projections, not in converse-rs");
#endif
#ifndef CthStackOffset
CONVERSE_RS_ABSENT_(CthStackOffset, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthSwitchThread
CONVERSE_RS_ABSENT_(CthSwitchThread, "not in converse-rs (thread serial numbers, suspendability and stack positions are the runtime's)");
#endif
#ifndef CthTraceResume
CONVERSE_RS_ABSENT_(CthTraceResume, "Charm++ trace/projections, not in converse-rs");
#endif
#ifndef free_nomigrate
CONVERSE_RS_ABSENT_(free_nomigrate, "no migratable-memory allocator in converse-rs");
#endif
#ifndef HypercubeGetBcastDestinations
CONVERSE_RS_ABSENT_(HypercubeGetBcastDestinations, "machine-layer internal (hypercube broadcast routing)");
#endif
#ifndef malloc_nomigrate
CONVERSE_RS_ABSENT_(malloc_nomigrate, "no migratable-memory allocator in converse-rs");
#endif
#ifndef node_gToLTranslate
CONVERSE_RS_ABSENT_(node_gToLTranslate, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef node_lToGTranslate
CONVERSE_RS_ABSENT_(node_lToGTranslate, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef pe_gToLTranslate
CONVERSE_RS_ABSENT_(pe_gToLTranslate, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef pe_lToGTranslate
CONVERSE_RS_ABSENT_(pe_lToGTranslate, "no job partitions (+partitions) in converse-rs");
#endif
#ifndef realConverseExit
CONVERSE_RS_ABSENT_(realConverseExit, "Charm++'s implementation behind ConverseExit; use ConverseExit");
#endif
#ifndef registerMultiSendMesg
CONVERSE_RS_ABSENT_(registerMultiSendMesg, "CmiAlloc chunk-header internals, not in converse-rs");
#endif
#ifndef setMemoryChareID
CONVERSE_RS_ABSENT_(setMemoryChareID, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef setMemoryChareIDFromPtr
CONVERSE_RS_ABSENT_(setMemoryChareIDFromPtr, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef setMemoryOwnedBy
CONVERSE_RS_ABSENT_(setMemoryOwnedBy, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef setMemoryStatus
CONVERSE_RS_ABSENT_(setMemoryStatus, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef setMemoryTypeChare
CONVERSE_RS_ABSENT_(setMemoryTypeChare, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif
#ifndef setMemoryTypeMessage
CONVERSE_RS_ABSENT_(setMemoryTypeMessage, "Charm++ parallel debugger (charmdebug), not in converse-rs");
#endif

/* conv-core/conv-header.h */
#ifndef getCmiReservedHeaderSize
CONVERSE_RS_ABSENT_(getCmiReservedHeaderSize, "Charm++'s machine-layer function behind CmiReservedHeaderSize, not in converse-rs");
#endif

/* conv-core/queueing.h */
#ifndef CqsIncreasePriorityForEntryMethod
CONVERSE_RS_ABSENT_(CqsIncreasePriorityForEntryMethod, "Charm++ entry-method priorities, not in converse-rs");
#endif
#ifndef CqsIncreasePriorityForMemCriticalEntries
CONVERSE_RS_ABSENT_(CqsIncreasePriorityForMemCriticalEntries, "scheduler memory adaptation (ADAPT_SCHED_MEM builds), not in converse-rs");
#endif

/* conv-core/cpthreads.h */
#ifndef Cpthread_init
CONVERSE_RS_ABSENT_(Cpthread_init, "not in converse-rs (use CpthreadModuleInit)");
#endif
#ifndef Cpthread_initialize
CONVERSE_RS_ABSENT_(Cpthread_initialize, "not in converse-rs (use CpthreadModuleInit)");
#endif
#ifndef Cpthread_top
CONVERSE_RS_ABSENT_(Cpthread_top, "Charm++'s internal thread entry, not in converse-rs");
#endif

/* conv-ccs/conv-ccs.h */
#ifndef CcsGetHandler
CONVERSE_RS_ABSENT_(CcsGetHandler, "the CCS handler table is the runtime's, not exposed by converse-rs");
#endif
#ifndef CcsInit
CONVERSE_RS_ABSENT_(CcsInit, "CCS start-up internals; converse-rs starts CCS itself");
#endif
#ifndef CcsRegisterHandlerExt
CONVERSE_RS_ABSENT_(CcsRegisterHandlerExt, "charm4py builds only, not in converse-rs");
#endif
#ifndef CcsReleaseMessages
CONVERSE_RS_ABSENT_(CcsReleaseMessages, "CCS start-up internals; converse-rs starts CCS itself");
#endif

/* conv-ccs/ccs-auth.h */
#ifndef CCS_AUTH_differ
CONVERSE_RS_ABSENT_(CCS_AUTH_differ, "CCS authentication internals (SHA-1, random stream), not in converse-rs");
#endif
#ifndef CCS_AUTH_hash
CONVERSE_RS_ABSENT_(CCS_AUTH_hash, "CCS authentication internals (SHA-1, random stream), not in converse-rs");
#endif
#ifndef CCS_RAND_new
CONVERSE_RS_ABSENT_(CCS_RAND_new, "CCS authentication internals (SHA-1, random stream), not in converse-rs");
#endif
#ifndef CCS_RAND_next
CONVERSE_RS_ABSENT_(CCS_RAND_next, "CCS authentication internals (SHA-1, random stream), not in converse-rs");
#endif

/* conv-ldb/cldb.h */
#ifndef CldCountTokensRank
CONVERSE_RS_ABSENT_(CldCountTokensRank, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif
#ifndef CldLoadRank
CONVERSE_RS_ABSENT_(CldLoadRank, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif
#ifndef CldPresentPE
CONVERSE_RS_ABSENT_(CldPresentPE, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif
#ifndef CldPutTokenPrio
CONVERSE_RS_ABSENT_(CldPutTokenPrio, "no token priorities in CldPutToken: not in converse-rs (CldPutToken keeps the seed's priority)");
#endif
#ifndef CldSetPEBitVector
CONVERSE_RS_ABSENT_(CldSetPEBitVector, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif
#ifndef CldSimpleMultipleSend
CONVERSE_RS_ABSENT_(CldSimpleMultipleSend, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif
#ifndef seedBalancerExit
CONVERSE_RS_ABSENT_(seedBalancerExit, "Charm++'s balancer internals (per-rank token queues, PE bit vectors), not in converse-rs");
#endif

/* util/pup_c.h */
#ifndef pup_comment
CONVERSE_RS_ABSENT_(pup_comment, "no comments or sync codes in converse-rs pup_ers");
#endif
#ifndef pup_decodeSize
CONVERSE_RS_ABSENT_(pup_decodeSize, "not in converse-rs (docs/c-abi.md: pup_c.h)");
#endif
#ifndef pup_encodeSize
CONVERSE_RS_ABSENT_(pup_encodeSize, "not in converse-rs (docs/c-abi.md: pup_c.h)");
#endif
#ifndef pup_fmt_sync_begin_array
CONVERSE_RS_ABSENT_(pup_fmt_sync_begin_array, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_fmt_sync_begin_object
CONVERSE_RS_ABSENT_(pup_fmt_sync_begin_object, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_fmt_sync_end_array
CONVERSE_RS_ABSENT_(pup_fmt_sync_end_array, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_fmt_sync_end_object
CONVERSE_RS_ABSENT_(pup_fmt_sync_end_object, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_fmt_sync_item
CONVERSE_RS_ABSENT_(pup_fmt_sync_item, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_isCheckpoint
CONVERSE_RS_ABSENT_(pup_isCheckpoint, "no checkpoint or migration pup_ers in converse-rs");
#endif
#ifndef pup_isMigration
CONVERSE_RS_ABSENT_(pup_isMigration, "no checkpoint or migration pup_ers in converse-rs");
#endif
#ifndef pup_new_fmt
CONVERSE_RS_ABSENT_(pup_new_fmt, "no fmt pup_ers in converse-rs");
#endif
#ifndef pup_new_network_pack
CONVERSE_RS_ABSENT_(pup_new_network_pack, "no network (machine-independent) pup_ers in converse-rs");
#endif
#ifndef pup_new_network_sizer
CONVERSE_RS_ABSENT_(pup_new_network_sizer, "no network (machine-independent) pup_ers in converse-rs");
#endif
#ifndef pup_new_network_unpack
CONVERSE_RS_ABSENT_(pup_new_network_unpack, "no network (machine-independent) pup_ers in converse-rs");
#endif
#ifndef pup_size_t
CONVERSE_RS_ABSENT_(pup_size_t, "not in converse-rs yet (pup_size_t, pup_size_ts)");
#endif
#ifndef pup_size_ts
CONVERSE_RS_ABSENT_(pup_size_ts, "not in converse-rs yet (pup_size_t, pup_size_ts)");
#endif
#ifndef pup_syncComment
CONVERSE_RS_ABSENT_(pup_syncComment, "no comments or sync codes in converse-rs pup_ers");
#endif
#ifndef pup_typeString
CONVERSE_RS_ABSENT_(pup_typeString, "not in converse-rs (docs/c-abi.md: pup_c.h)");
#endif

#ifdef __cplusplus
}
#endif
#if defined(__GNUC__) && !defined(__cplusplus)
#pragma GCC diagnostic pop
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_ABSENT_H */
