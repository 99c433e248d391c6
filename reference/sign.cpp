// TEMPORARY bootstrap file: replaced by the real reference codec before commit.
#include "common.hpp"
namespace gradcodec::reference {
std::size_t sign_workspace(const codec_spec&, const_tensor_view, operation) { return 0; }
status sign_encode(const detail::encode_call&) { return {status_code::backend_unavailable, "sign: BOOTSTRAP"}; }
status sign_decode(const detail::decode_call&) { return {status_code::backend_unavailable, "sign: BOOTSTRAP"}; }
}  // namespace gradcodec::reference
