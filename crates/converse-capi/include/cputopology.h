/*
 * cputopology.h: physical nodes (hosts), cores and CPU affinity. The
 * declarations are converse.h's (as in Charm++, whose converse.h has
 * them): CmiNumCores, CmiCpuTopologyEnabled, CmiInitCPUTopology,
 * CmiNumPhysicalNodes, CmiPhysicalNodeID, CmiNumPesOnPhysicalNode,
 * CmiGetPesOnPhysicalNode, CmiGetFirstPeOnPhysicalNode, CmiPhysicalRank,
 * CmiPeOnSamePhysicalNode, CmiInitCPUAffinity, CmiSetCPUAffinity,
 * CmiPrintCPUAffinity.
 */
#ifndef CONVERSE_RS_CPUTOPOLOGY_H
#define CONVERSE_RS_CPUTOPOLOGY_H
#include "converse.h"
#endif /* CONVERSE_RS_CPUTOPOLOGY_H */
