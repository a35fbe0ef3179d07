/* (being written) */
#ifndef CONVERSE_RS_CLDB_H
#define CONVERSE_RS_CLDB_H
#endif
