/* (being written) */
#ifndef CONVERSE_RS_CCS_CLIENT_H
#define CONVERSE_RS_CCS_CLIENT_H
#endif
