#ifndef STORECTL_CCRYPTO_SHIM_H
#define STORECTL_CCRYPTO_SHIM_H
// OpenSSL's libcrypto (Debian: libssl-dev), headers only: the library is loaded with dlopen (LibCrypto.swift), so
// the target has no pkg-config entry, whose flags would link it into every process. Linked, it added 0.6 ms to
// the start of every command (a C program that does nothing: 0.6 ms plain, 1.2-1.3 ms linked with -lcrypto).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#endif
