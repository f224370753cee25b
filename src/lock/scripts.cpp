#include "scripts.hpp"

#include <colock/detail/lock_scripts.hpp>

#include <fmt/format.h>
#include <openssl/evp.h>

#include <stdexcept>

namespace colock::detail {

namespace {

std::string sha1_hex(std::string_view text) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha1(), nullptr) != 1)
        throw std::runtime_error("colock: SHA-1 of a lock script failed");
    std::string out;
    for (unsigned i = 0; i < length; ++i)
        out += fmt::format("{:02x}", digest[i]);
    return out;
}

} // namespace

script const& acquire_script() {
    static script const s{acquire_source, sha1_hex(acquire_source)};
    return s;
}
script const& release_script() {
    static script const s{release_source, sha1_hex(release_source)};
    return s;
}
script const& extend_script() {
    static script const s{extend_source, sha1_hex(extend_source)};
    return s;
}
script const& status_script() {
    static script const s{status_source, sha1_hex(status_source)};
    return s;
}
script const& force_unlock_script() {
    static script const s{force_unlock_source, sha1_hex(force_unlock_source)};
    return s;
}

} // namespace colock::detail
