/* (being written) */
#ifndef CONVERSE_RS_CONV_CPM_H
#define CONVERSE_RS_CONV_CPM_H
#endif
