#ifndef STORECTL_CLIBPQ_SHIM_H
#define STORECTL_CLIBPQ_SHIM_H
// The header only: the library is loaded with dlopen (LibPQ.swift), so the target has no pkg-config entry, whose
// flags would link it. Debian and Ubuntu install the header under postgresql/; other systems put it on the
// include path directly.
#if __has_include(<libpq-fe.h>)
#include <libpq-fe.h>
#else
#include <postgresql/libpq-fe.h>
#endif
#endif
