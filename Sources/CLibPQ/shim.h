#ifndef STORECTL_CLIBPQ_SHIM_H
#define STORECTL_CLIBPQ_SHIM_H
#include <libpq-fe.h>
#endif
