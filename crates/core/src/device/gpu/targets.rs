//! The shading languages wgpu translates gpulab's WGSL into (with naga), and the kernel paths a
//! language cannot express: such a path is refused by name on that backend, never attempted.
//! `tests` below translates every kernel gpulab can build into each language, so a shader that
//! would fail to compile on a Mac (MSL), on Windows (HLSL) or on GL (GLSL) fails here first.

/// Why the cooperative-matrix f16 GEMM cannot run on `backend`, if it cannot: naga writes
/// cooperative matrices only to SPIR-V and to MSL 2.3+ (wgpu offers the feature on Metal only
/// there); its HLSL and GLSL writers have none.
pub fn coop_refusal(backend: wgpu::Backend) -> Option<String> {
    let lang = match backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal => return None,
        wgpu::Backend::Dx12 => "HLSL (DX12)",
        wgpu::Backend::Gl => "GLSL (GL)",
        _ => "this backend's shading language",
    };
    Some(format!(
        "the cooperative-matrix f16 GEMM cannot be expressed in {lang}: naga has no cooperative matrices there; the other 16-bit GEMMs run"
    ))
}

/// Why `backend` cannot run f16 kernels, if it cannot: naga's GLSL writer has no 16-bit floats
/// (wgpu's GL backend never offers SHADER_F16, so the lab refuses fp16 there by that name too).
/// HLSL needs shader model 6.2, which wgpu's DX12 backend requires before it offers SHADER_F16.
pub fn f16_refusal(backend: wgpu::Backend) -> Option<String> {
    (backend == wgpu::Backend::Gl)
        .then(|| "f16 kernels cannot be expressed in GLSL (GL): naga has no 16-bit floats there; bf16 and fp32 run".to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use naga::back::{glsl, hlsl, msl, spv};
    use naga::valid::{Capabilities, ModuleInfo, ValidationFlags, Validator};

    use super::super::kernels::{Compile, Kernel, PipelineKey, source};
    use super::{coop_refusal, f16_refusal};
    use crate::tensor::DType;

    /// Every WGSL module gpulab can build: each kernel in each type it is built for, with every
    /// variant bit combination (transposes, vec4 loads), deduplicated by source.
    fn every_module() -> BTreeMap<String, (Kernel, DType, u32)> {
        let mut out = BTreeMap::new();
        for &kernel in Kernel::ALL {
            let types: &[DType] = match kernel.compile() {
                Compile::Per16BitType if kernel == Kernel::Matmul16Coop => &[DType::F16],
                Compile::Per16BitType => &[DType::F16, DType::BF16],
                _ if matches!(kernel, Kernel::MatmulI8 | Kernel::MatmulI8Dequant) => &[DType::I8],
                _ => &[DType::F32],
            };
            for &dtype in types {
                for variant in 0..16 {
                    let src = source(PipelineKey { kernel, dtype, variant }).unwrap();
                    out.entry(src).or_insert((kernel, dtype, variant));
                }
            }
        }
        out
    }

    /// What the module needs of its target beyond WGSL's core: f16 arithmetic, cooperative
    /// matrices, subgroup builtins.
    fn needs(module: &naga::Module) -> Capabilities {
        // Validate with everything allowed, then find the smallest set that still validates.
        let all = Capabilities::SHADER_FLOAT16
            | Capabilities::SHADER_FLOAT16_IN_FLOAT32
            | Capabilities::COOPERATIVE_MATRIX
            | Capabilities::SUBGROUP;
        let mut caps = all;
        for c in [
            Capabilities::COOPERATIVE_MATRIX,
            Capabilities::SUBGROUP,
            Capabilities::SHADER_FLOAT16,
            Capabilities::SHADER_FLOAT16_IN_FLOAT32,
        ] {
            if Validator::new(ValidationFlags::all(), caps - c).validate(module).is_ok() {
                caps -= c;
            }
        }
        caps
    }

    fn validate(module: &naga::Module, caps: Capabilities, what: &str) -> ModuleInfo {
        Validator::new(ValidationFlags::all(), caps).validate(module).unwrap_or_else(|e| panic!("{what}: {e:?}"))
    }

    /// GLES 3.1: compute shaders, one entry point per program.
    fn glsl_es(module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
        let opts = glsl::Options { version: glsl::Version::Embedded { version: 310, is_webgl: false }, ..Default::default() };
        for ep in &module.entry_points {
            let pipe = glsl::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: ep.name.clone(), multiview: None };
            let mut out = String::new();
            glsl::Writer::new(&mut out, module, info, &opts, &pipe, Default::default())
                .and_then(|mut w| w.write())
                .map_err(|e| format!("entry {}: {e}", ep.name))?;
        }
        Ok(())
    }

    #[test]
    fn every_kernel_translates_to_spirv_msl_hlsl_and_glsl_or_is_refused_there_by_name() {
        let modules = every_module();
        let (mut translated, mut refused) = (0, Vec::new());
        for (src, (kernel, dtype, variant)) in &modules {
            let what = format!("{kernel:?} {} variant {variant}", dtype.name());
            let module = naga::front::wgsl::parse_str(src).unwrap_or_else(|e| panic!("{what}: {}", e.emit_to_string(src)));
            let caps = needs(&module);
            let info = validate(&module, caps, &what);
            let f16 = caps.contains(Capabilities::SHADER_FLOAT16);
            let coop = caps.contains(Capabilities::COOPERATIVE_MATRIX);
            assert_eq!(f16, *dtype == DType::F16, "{what}: only the f16 instances use f16");
            assert_eq!(coop, *kernel == Kernel::Matmul16Coop, "{what}: only the cooperative GEMM uses cooperative matrices");
            // The cooperative GEMM reads its subgroup's index (each subgroup owns its tiles): the
            // device is opened with SUBGROUP for it (`adapters::has_coop_f16`).
            assert_eq!(caps.contains(Capabilities::SUBGROUP), coop, "{what}: only the cooperative GEMM uses subgroups");

            // SPIR-V (Vulkan): 1.3 as wgpu writes it, 1.6 where cooperative matrices need it.
            let lang_version = if coop { (1, 6) } else { (1, 3) };
            let opts = spv::Options { lang_version, ..Default::default() };
            spv::write_vec(&module, &info, &opts, None).unwrap_or_else(|e| panic!("{what} → SPIR-V: {e}"));

            // MSL (Metal): 2.1 carries half; cooperative matrices need 2.3 and are refused below.
            let msl_at = |v: (u8, u8)| {
                let opts = msl::Options { lang_version: v, ..Default::default() };
                msl::write_string(&module, &info, &opts, &msl::PipelineOptions::default()).map(|_| ())
            };
            if coop {
                assert!(matches!(msl_at((2, 2)), Err(msl::Error::UnsupportedCooperativeMatrix)), "{what}: MSL 2.2 must refuse");
                msl_at((2, 3)).unwrap_or_else(|e| panic!("{what} → MSL 2.3: {e}"));
                assert_eq!(coop_refusal(wgpu::Backend::Metal), None, "wgpu offers the feature on Metal only with MSL 2.3");
            } else {
                msl_at((2, 1)).unwrap_or_else(|e| panic!("{what} → MSL 2.1: {e}"));
            }

            // HLSL (DX12) and GLSL (GL): no cooperative matrices; the backend refuses that path.
            for (backend, supported) in
                [(wgpu::Backend::Dx12, hlsl::supported_capabilities()), (wgpu::Backend::Gl, glsl::supported_capabilities())]
            {
                if !supported.contains(caps) {
                    let why =
                        coop_refusal(backend).unwrap_or_else(|| panic!("{what}: {backend:?} cannot express it but does not refuse it"));
                    refused.push(format!("{what} on {backend:?}: {why}"));
                    continue;
                }
                if f16 && backend == wgpu::Backend::Gl {
                    // naga lists SHADER_FLOAT16 for GLSL but cannot write a 16-bit float: the GL
                    // backend refuses f16 by name (and the GLSL writer must indeed fail).
                    let why = f16_refusal(backend).unwrap_or_else(|| panic!("{what}: GL cannot express f16 but does not refuse it"));
                    assert!(glsl_es(&module, &info).is_err(), "{what}: GLSL now expresses f16; drop the refusal");
                    refused.push(format!("{what} on {backend:?}: {why}"));
                    continue;
                }
                match backend {
                    wgpu::Backend::Dx12 => {
                        // f16 needs shader model 6.2 (wgpu offers SHADER_F16 on DX12 only there);
                        // everything else runs on DX12's minimum, 5.1.
                        let shader_model = if f16 { hlsl::ShaderModel::V6_2 } else { hlsl::ShaderModel::V5_1 };
                        let opts = hlsl::Options { shader_model, ..Default::default() };
                        let mut out = String::new();
                        hlsl::Writer::new(&mut out, &opts, &hlsl::PipelineOptions::default())
                            .write(&module, &info, None)
                            .unwrap_or_else(|e| panic!("{what} → HLSL {shader_model:?}: {e}"));
                    }
                    _ => glsl_es(&module, &info).unwrap_or_else(|e| panic!("{what} → GLSL ES 3.10: {e}")),
                }
            }
            translated += 1;
        }
        eprintln!("{translated} modules translated; refused by name: {refused:#?}");
        assert!(modules.len() > 60, "every kernel and variant: {}", modules.len());
        assert!(refused.len() >= 2, "the cooperative GEMM is refused on DX12 and GL");
        assert_eq!(f16_refusal(wgpu::Backend::Vulkan), None);
        assert_eq!(coop_refusal(wgpu::Backend::Vulkan), None);
    }
}
