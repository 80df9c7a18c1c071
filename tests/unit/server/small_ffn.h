#pragma once

// The small FFN GraphDef the server's unit tests register: y = relu(x w1) w2 with x [tokens, 4]
// (tokens symbolic), w1 [4, 8], w2 [8, 4].

namespace einsummable::server::testing {

inline constexpr char kFfn[] = R"pb(
  inputs {
    name: "x"
    dtype: F32
    dims { name: "tokens" symbol: "tokens" }
    dims { name: "d_model" fixed: 4 }
  }
  inputs {
    name: "w1"
    dtype: F32
    dims { name: "d_model" fixed: 4 }
    dims { name: "d_ff" fixed: 8 }
  }
  inputs {
    name: "w2"
    dtype: F32
    dims { name: "d_ff" fixed: 8 }
    dims { name: "d_model" fixed: 4 }
  }
  operators {
    name: "h"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "x", "w1" ]
  }
  operators {
    name: "a"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij->ij" }
    }
    attributes {
      key: "join"
      value { string_value: "relu" }
    }
    inputs: "h"
  }
  operators {
    name: "y"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "a", "w2" ]
  }
  saved: "y"
)pb";

} // namespace einsummable::server::testing
