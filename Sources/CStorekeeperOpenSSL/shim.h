#ifndef STOREKEEPER_COPENSSL_SHIM_H
#define STOREKEEPER_COPENSSL_SHIM_H

// OpenSSL 3 for Storekeeper. Only headers, plus tiny inline wrappers for the macros and
// type-generic stack functions that Swift cannot call directly.

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/cms.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

static inline STACK_OF(X509) *sk_shim_X509_new_null(void) { return sk_X509_new_null(); }
static inline int sk_shim_X509_push(STACK_OF(X509) *stack, X509 *cert) { return sk_X509_push(stack, cert); }
static inline int sk_shim_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *sk_shim_X509_value(const STACK_OF(X509) *stack, int index) { return sk_X509_value(stack, index); }
/// Frees the stack only; the certificates stay owned by their Swift wrappers.
static inline void sk_shim_X509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
static inline void sk_shim_X509_pop_free(STACK_OF(X509) *stack) { sk_X509_pop_free(stack, X509_free); }

static inline long shim_BIO_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
static inline void shim_OPENSSL_free(void *pointer) { OPENSSL_free(pointer); }
static inline unsigned long shim_XN_FLAG_RFC2253_UTF8(void) { return XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB; }
static inline void shim_X509V3_set_ctx_nodb(X509V3_CTX *ctx) { X509V3_set_ctx_nodb(ctx); }

static inline int shim_EVP_PKEY_CTX_set_rsa_padding(EVP_PKEY_CTX *ctx, int padding) {
    return EVP_PKEY_CTX_set_rsa_padding(ctx, padding);
}
static inline int shim_EVP_PKEY_CTX_set_rsa_keygen_bits(EVP_PKEY_CTX *ctx, int bits) {
    return EVP_PKEY_CTX_set_rsa_keygen_bits(ctx, bits);
}
static inline int shim_EVP_PKEY_CTX_set_ec_paramgen_curve_nid(EVP_PKEY_CTX *ctx, int nid) {
    return EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, nid);
}
static inline int shim_EVP_PKEY_CTX_set_signature_md(EVP_PKEY_CTX *ctx, const EVP_MD *md) {
    return EVP_PKEY_CTX_set_signature_md(ctx, md);
}


#endif
