// Winograd F(2x2, 3x3)'s tile transforms (Lavin and Gray, 2015), shared by
// conv_winograd.comp and its one-pass kernels. A tile's 16 points are stored
// row-major: point 4a + b.

// Tile p, of tiles_h x tiles_w a sample: its sample and the top-left of its
// 2 x 2 outputs (the input patch starts there, less the padding).
uvec3 winograd_tile(uint p, uint tiles_h, uint tiles_w) {
  const uint per_sample = tiles_h * tiles_w, q = p % per_sample;
  return uvec3(p / per_sample, 2 * (q / tiles_w), 2 * (q % tiles_w));
}

// v = B^T d B of a 4 x 4 input patch.
void winograd_input(in float d[4][4], out float v[16]) {
  float s[4][4];  // B^T d
  for (uint b = 0; b < 4; ++b) {
    s[0][b] = d[0][b] - d[2][b];
    s[1][b] = d[1][b] + d[2][b];
    s[2][b] = d[2][b] - d[1][b];
    s[3][b] = d[1][b] - d[3][b];
  }
  for (uint a = 0; a < 4; ++a) {  // (B^T d) B
    v[4 * a] = s[a][0] - s[a][2];
    v[4 * a + 1] = s[a][1] + s[a][2];
    v[4 * a + 2] = s[a][2] - s[a][1];
    v[4 * a + 3] = s[a][1] - s[a][3];
  }
}

// y = A^T m A: a tile's 2 x 2 outputs from its 16 products.
void winograd_output(in float m[16], out float y[2][2]) {
  float s[2][4];  // A^T m
  for (uint b = 0; b < 4; ++b) {
    s[0][b] = m[b] + m[4 + b] + m[8 + b];
    s[1][b] = m[4 + b] - m[8 + b] - m[12 + b];
  }
  for (uint a = 0; a < 2; ++a) {  // (A^T m) A
    y[a][0] = s[a][0] + s[a][1] + s[a][2];
    y[a][1] = s[a][1] - s[a][2] - s[a][3];
  }
}

// g = A dy A^T of a tile's 2 x 2 output gradient (the weight gradient's transform).
void winograd_output_gradient(in float dy[2][2], out float g[16]) {
  float s[4][2];  // A dy
  for (uint b = 0; b < 2; ++b) {
    s[0][b] = dy[0][b];
    s[1][b] = dy[0][b] + dy[1][b];
    s[2][b] = dy[0][b] - dy[1][b];
    s[3][b] = -dy[1][b];
  }
  for (uint a = 0; a < 4; ++a) {  // (A dy) A^T
    g[4 * a] = s[a][0];
    g[4 * a + 1] = s[a][0] + s[a][1];
    g[4 * a + 2] = s[a][0] - s[a][1];
    g[4 * a + 3] = -s[a][1];
  }
}
