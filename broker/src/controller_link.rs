//! The broker's link to the controller: typed calls to the active
//! controller (`strand_metadata::controller_api`) and the committed
//! metadata image as it is published here. The binary builds it from the
//! controller's handle; the broker never names the controller crate.

use std::ops::Deref;
use std::sync::Arc;
use strand_metadata::controller_api::ControllerClient;
use strand_metadata::image::MetadataImage;
use tokio::sync::watch;

#[derive(Clone)]
pub struct ControllerLink {
    client: ControllerClient,
    images: watch::Receiver<Arc<MetadataImage>>,
}

impl ControllerLink {
    pub fn new(client: ControllerClient, images: watch::Receiver<Arc<MetadataImage>>) -> Self {
        ControllerLink { client, images }
    }

    /// The latest committed metadata image known here.
    pub fn image(&self) -> Arc<MetadataImage> {
        self.images.borrow().clone()
    }

    /// A receiver that sees every image published here.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.images.clone()
    }
}

/// The typed calls (`create_topics`, `heartbeat`, `alter_partition`, ...).
impl Deref for ControllerLink {
    type Target = ControllerClient;

    fn deref(&self) -> &ControllerClient {
        &self.client
    }
}
